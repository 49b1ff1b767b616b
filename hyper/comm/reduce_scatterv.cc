// reduce_scatter_v: all_to_all_v of the pieces (rank j's piece r goes to rank r), then a local
// reduction in rank order. Deterministic; every dtype; each rank sends all rows but its own
// piece and receives (n-1) copies of its own piece.
#include <ATen/ATen.h>

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

}  // namespace hyper::comm
