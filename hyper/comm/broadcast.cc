// broadcast: flat — src isends the tensor to every other rank at once, the others irecv in
// place. One step; src sends (n-1)*N bytes, every other rank receives N.
#include <ATen/ATen.h>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"

namespace hyper::comm {

Work broadcast_async(const at::Tensor& tensor, int src, const Group& group) {
  const auto& g = internal::checked_state(group, "broadcast");
  const std::string what = internal::describe("broadcast", group);
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.rank;
  HYPER_CHECK_VALUE(src >= 0 && src < n, what, ": src ", src, " is not a rank of the group (size ",
                    n, ")");
  HYPER_CHECK_VALUE(tensor.defined(), what, ": tensor is undefined");
  if (internal::staging_device(g, tensor)) {
    return internal::copy_into(broadcast_async(tensor.to(at::kCPU), src, group), tensor);
  }
  auto* gs = const_cast<internal::GroupState*>(&g);
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  if (n == 1 || bytes == 0) {
    gs->record(CollectiveKind::kBroadcast, 0, 0);
    return internal::ready_work(what, tensor);
  }
  const int tag = gs->next_p2p_tag();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
  try {
    if (me == src) {
      for (int i = 0; i < n; ++i) {
        if (i == me) continue;
        std::vector<at::Tensor> t{buf};
        works.push_back(g.pg->send(t, i, tag));
      }
      gs->record(CollectiveKind::kBroadcast, bytes * (n - 1), 0);
    } else {
      std::vector<at::Tensor> t{buf};
      works.push_back(g.pg->recv(t, src, tag));
      gs->record(CollectiveKind::kBroadcast, 0, bytes);
    }
  } catch (const c10::Error& e) {
    rethrow_c10_error<CommError>(e, what);
  } catch (const std::exception& e) {
    rethrow_foreign_error(e, what);  // gloo::IoException at issue time
  }
  at::Tensor out = tensor;
  const bool copy_back = !tensor.is_contiguous() && me != src;
  return internal::make_work(
      what, std::move(works),
      [out, buf, copy_back]() mutable {
        if (copy_back) out.copy_(buf);
        return out;
      },
      {buf});
}

at::Tensor broadcast(const at::Tensor& tensor, int src, const Group& group) {
  return broadcast_async(tensor, src, group).wait();
}

}  // namespace hyper::comm
