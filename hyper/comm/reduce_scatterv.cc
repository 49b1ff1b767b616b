// reduce_scatter_v: all_to_all_v of the pieces (rank j's piece r goes to rank r), then a local
// reduction in rank order. Deterministic; every dtype; each rank sends all rows but its own
// piece and receives (n-1) copies of its own piece. reduce_scatter_pieces: the same exchange
// point-to-point, one message per piece, straight from where the pieces lie.
#include <ATen/ATen.h>

#include <algorithm>

#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"

namespace hyper::comm {

Work reduce_scatter_v_async(const at::Tensor& input_, const std::vector<int64_t>& splits,
                            ReduceOp op, const Group& group) {
  const auto& g = internal::checked_state(group, "reduce_scatter_v");
  const std::string what =
      internal::describe("reduce_scatter_v", group) + " op " + to_string(op);
  HYPER_CHECK_VALUE(input_.defined(), what, ": input is undefined");
  HYPER_CHECK_VALUE(input_.dim() >= 1, what, ": input must have at least one dimension");
  internal::check_op_dtype(op, input_, what);
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.rank;
  internal::check_splits(splits, n, input_.size(0), what, "splits");
  const std::vector<int64_t> out_splits(n, splits[me]);
  auto* gs = const_cast<internal::GroupState*>(&g);
  // The exchange is an all_to_all_v; count it under reduce_scatter_v.
  Work exchanged = all_to_all_v_async(input_, splits, out_splits, group);
  const int64_t row_bytes = internal::row_numel(input_) * input_.element_size();
  int64_t sent = 0;
  for (int i = 0; i < n; ++i)
    if (i != me) sent += splits[i] * row_bytes;
  const int64_t received = (n - 1) * splits[me] * row_bytes;
  gs->record(CollectiveKind::kReduceScatterV, sent, received);
  gs->counters->add(CollectiveKind::kAllToAllV, -sent, -received, -1);
  if (gs->world_counters) gs->world_counters->add(CollectiveKind::kAllToAllV, -sent, -received, -1);
  std::vector<int64_t> piece_shape = internal::with_rows(input_, splits[me]);
  std::vector<int64_t> stacked_shape = piece_shape;
  stacked_shape.insert(stacked_shape.begin(), n);
  return internal::make_work_after(what, exchanged, [exchanged, stacked_shape, n, op]() {
    at::Tensor all = exchanged.wait().reshape(stacked_shape);
    return internal::reduce_pieces(all, n, op);
  });
}

at::Tensor reduce_scatter_v(const at::Tensor& input, const std::vector<int64_t>& splits,
                            ReduceOp op, const Group& group) {
  return reduce_scatter_v_async(input, splits, op, group).wait();
}

Work reduce_scatter_pieces_async(const std::vector<std::vector<at::Tensor>>& pieces, ReduceOp op,
                                 const Group& group, std::optional<at::Tensor> given_output) {
  const auto& g = internal::checked_state(group, "reduce_scatter_pieces");
  const std::string what =
      internal::describe("reduce_scatter_pieces", group) + " op " + to_string(op);
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.rank;
  HYPER_CHECK_VALUE(static_cast<int>(pieces.size()) == n, what, ": ", pieces.size(),
                    " lists of pieces for a group of ", n);
  const at::Tensor* first = nullptr;
  size_t most = 0;
  std::vector<int64_t> splits(n, 0);
  for (int j = 0; j < n; ++j) {
    most = std::max(most, pieces[j].size());
    for (size_t i = 0; i < pieces[j].size(); ++i) {
      const at::Tensor& t = pieces[j][i];
      HYPER_CHECK_VALUE(t.defined() && t.dim() == 1 && t.is_contiguous(), what, ": piece ", i,
                        " for rank ", j, " must be a contiguous 1-D tensor, got ",
                        t.defined() ? t.toString() + " of sizes " + c10::str(t.sizes()) +
                                          (t.is_contiguous() ? "" : " (not contiguous)")
                                    : std::string("an undefined tensor"));
      if (first == nullptr) first = &t;
      HYPER_CHECK_VALUE(t.scalar_type() == first->scalar_type() && t.device() == first->device(),
                        what, ": piece ", i, " for rank ", j, " is ", t.scalar_type(), " on ",
                        t.device(), ", the first piece ", first->scalar_type(), " on ",
                        first->device());
      splits[j] += t.numel();
    }
  }
  const at::TensorOptions options =
      first != nullptr ? first->options()
                       : (given_output ? given_output->options() : at::TensorOptions(at::kFloat));
  const at::Tensor probe = at::empty({0}, options);
  internal::check_op_dtype(op, probe, what);
  const int64_t total = splits[me];
  at::Tensor output;
  if (given_output) {
    output = *given_output;
    // A wider floating output accumulates floating pieces in its dtype (e.g. bf16 gradients
    // reduced in fp32: half the bytes on the wire, the same sum).
    const bool dtype_ok = output.defined() &&
                          (output.scalar_type() == probe.scalar_type() ||
                           (at::isFloatingType(output.scalar_type()) &&
                            at::isFloatingType(probe.scalar_type()) &&
                            output.element_size() > probe.element_size()));
    HYPER_CHECK_VALUE(dtype_ok && output.dim() == 1 && output.is_contiguous() &&
                          output.numel() == total && output.device() == probe.device(),
                      what, ": output must be a contiguous 1-D ", probe.scalar_type(),
                      " (or wider floating) tensor of ", total, " elements on ", probe.device(),
                      ", got ",
                      output.defined() ? output.toString() + " of sizes " + c10::str(output.sizes())
                                       : std::string("an undefined tensor"));
  } else {
    output = at::empty({total}, options);
  }
  const std::vector<at::Tensor>& mine = pieces[me];
  if (internal::staging_device(g, probe) || n == 1) {
    // One rank, or device memory the group cannot move: concatenate (a copy) and reduce.
    std::vector<at::Tensor> flat;
    for (const auto& list : pieces)
      for (const auto& t : list) flat.push_back(t);
    at::Tensor input = flat.empty() ? at::empty({0}, options) : at::cat(flat);
    return internal::copy_into(
        reduce_scatter_v_async(input.to(output.scalar_type()), splits, op, group), output);
  }
  const bool widen = output.scalar_type() != probe.scalar_type();
  const int64_t elem = probe.element_size();
  auto* gs = const_cast<internal::GroupState*>(&g);
  const int tag0 = gs->next_p2p_tags(static_cast<int>(std::max<size_t>(most, 1)));
  // The first peer in rank order (rank 0, or 1 on rank 0) sends straight into `output`,
  // which the reduction's first step reads and overwrites element by element; the others
  // land in the rows of `received`, in rank order. A wider output receives nothing.
  const int direct = widen ? -1 : (me == 0 ? 1 : 0);
  at::Tensor received = at::empty({widen ? n - 1 : n - 2, total}, options);
  const auto landing = [output, received, direct, me](int r) {
    return r == direct ? output
                       : received[r - (direct >= 0 && r > direct ? 1 : 0) - (r > me ? 1 : 0)];
  };
  std::vector<at::Tensor> keep{output, received};
  int64_t sent = 0;
  internal::C10dWorks works =
      internal::issue_point_to_point(g, probe.is_cuda(), what, [&](internal::C10dWorks& ws) {
        for (int j = 0; j < n; ++j) {
          if (j == me) continue;
          for (size_t i = 0; i < pieces[j].size(); ++i) {
            const at::Tensor& t = pieces[j][i];
            if (t.numel() == 0) continue;
            std::vector<at::Tensor> one{t};
            ws.push_back(g.pg->send(one, j, (tag0 + static_cast<int>(i)) & 0x3fffffff));
            keep.push_back(t);
            sent += t.numel() * elem;
          }
          int64_t at = 0;
          for (size_t i = 0; i < mine.size(); ++i) {
            const int64_t k = mine[i].numel();
            if (k > 0) {
              std::vector<at::Tensor> one{landing(j).narrow(0, at, k)};
              ws.push_back(g.pg->recv(one, j, (tag0 + static_cast<int>(i)) & 0x3fffffff));
            }
            at += k;
          }
        }
      });
  for (const auto& t : mine) keep.push_back(t);
  gs->record(CollectiveKind::kReduceScatterV, sent, (n - 1) * total * elem);
  return internal::make_work(
      what, std::move(works),
      [mine, received, output, n, me, op, landing] {
        // Piece by piece, the ranks' parts in rank order (this rank's read where it lies).
        // The output holds rank `direct`'s part, which is parts[0] or parts[1]: only the
        // first step reads it, elementwise, as it writes the output.
        int64_t at = 0;
        for (const auto& own : mine) {
          const int64_t k = own.numel();
          if (k > 0) {
            std::vector<at::Tensor> parts;
            for (int r = 0; r < n; ++r)
              parts.push_back(r == me ? own : landing(r).narrow(0, at, k));
            internal::reduce_into(output.narrow(0, at, k), parts, op);
          }
          at += k;
        }
        return output;
      },
      std::move(keep));
}

}  // namespace hyper::comm
