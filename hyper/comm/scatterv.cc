// scatter_v: rank src isends each rank its rows, all sends in flight at once; the others
// post one irecv. No padding, no collective: src sends exactly the bytes each rank needs.
#include <ATen/ATen.h>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"

namespace hyper::comm {

Work scatter_v_async(const at::Tensor& input_, const std::vector<int64_t>& splits, int src,
                     const Group& group) {
  const auto& g = internal::checked_state(group, "scatter_v");
  const std::string what = internal::describe("scatter_v", group);
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.rank;
  HYPER_CHECK_VALUE(src >= 0 && src < n, what, ": src ", src, " is not a rank of the group (size ",
                    n, ")");
  HYPER_CHECK_VALUE(input_.defined(), what,
                    ": input is undefined (non-src ranks pass a tensor giving dtype and "
                    "trailing shape, e.g. at::empty({0, d}))");
  HYPER_CHECK_VALUE(input_.dim() >= 1, what, ": input must have at least one dimension");
  internal::check_splits(splits, n, me == src ? input_.size(0) : -1, what, "splits");
  if (auto device = internal::staging_device(g, input_)) {
    return internal::result_to(scatter_v_async(input_.to(at::kCPU), splits, src, group), *device);
  }
  const int64_t row_bytes = internal::row_numel(input_) * input_.element_size();
  auto* gs = const_cast<internal::GroupState*>(&g);
  const int tag = n > 1 ? gs->next_p2p_tag() : 0;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> keep;
  at::Tensor output;
  try {
    if (me == src) {
      const at::Tensor input = input_.contiguous();
      keep.push_back(input);
      int64_t offset = 0, sent = 0;
      for (int i = 0; i < n; ++i) {
        const at::Tensor piece = input.narrow(0, offset, splits[i]);
        if (i == me) {
          output = piece.clone();
        } else if (splits[i] > 0) {
          std::vector<at::Tensor> t{piece};
          works.push_back(g.pg->send(t, i, tag));
          keep.push_back(piece);
          sent += splits[i] * row_bytes;
        }
        offset += splits[i];
      }
      gs->record(CollectiveKind::kScatterV, sent, 0);
    } else {
      output = at::empty(internal::with_rows(input_, splits[me]), input_.options());
      if (splits[me] > 0) {
        std::vector<at::Tensor> t{output};
        works.push_back(g.pg->recv(t, src, tag));
      }
      gs->record(CollectiveKind::kScatterV, 0, splits[me] * row_bytes);
    }
  } catch (const c10::Error& e) {
    rethrow_c10_error<CommError>(e, what);
  } catch (const std::exception& e) {
    rethrow_foreign_error(e, what);  // gloo::IoException at issue time
  }
  keep.push_back(output);
  return internal::make_work(what, std::move(works), [output] { return output; },
                             std::move(keep));
}

at::Tensor scatter_v(const at::Tensor& input, const std::vector<int64_t>& splits, int src,
                     const Group& group) {
  return scatter_v_async(input, splits, src, group).wait();
}

}  // namespace hyper::comm
