// all_to_all_v: uneven all-to-all along dim 0 through c10d's all_to_all_single, on the raw bytes
// of the tensors (so every dtype moves, and zero-row ranks need no special case).
#include <ATen/ATen.h>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"

namespace hyper::comm {

Work all_to_all_v_async(const at::Tensor& input_, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits, const Group& group,
                        std::optional<at::Tensor> given_output) {
  const auto& g = internal::checked_state(group, "all_to_all_v");
  const std::string what = internal::describe("all_to_all_v", group);
  HYPER_CHECK_VALUE(input_.defined(), what, ": input is undefined");
  HYPER_CHECK_VALUE(input_.dim() >= 1, what, ": input must have at least one dimension");
  const at::Tensor input = input_.contiguous();
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.rank;
  internal::check_splits(input_splits, n, input.size(0), what, "input_splits");
  internal::check_splits(output_splits, n, -1, what, "output_splits");
  int64_t out_rows = 0;
  for (int64_t r : output_splits) out_rows += r;
  at::Tensor output;
  if (given_output) {
    output = *given_output;
    internal::check_given_output(output, input, internal::with_rows(input, out_rows), what);
  }
  if (internal::staging_device(g, input)) {  // after the checks: errors are the same either way
    Work host = all_to_all_v_async(input.to(at::kCPU), input_splits, output_splits, group);
    return given_output ? internal::copy_into(host, output)
                        : internal::result_to(host, input.device());
  }
  if (!given_output) {
    output = at::empty(internal::with_rows(input, out_rows), input.options());
  }
  const int64_t row_bytes = internal::row_numel(input) * input.element_size();
  int64_t sent = 0, received = 0;
  for (int i = 0; i < n; ++i) {
    if (i == me) continue;
    sent += input_splits[i] * row_bytes;
    received += output_splits[i] * row_bytes;
  }
  auto* gs = const_cast<internal::GroupState*>(&g);
  if (n == 1) {
    HYPER_CHECK_VALUE(input_splits[0] == output_splits[0], what,
                      ": input_splits[0] = ", input_splits[0],
                      " differs from output_splits[0] = ", output_splits[0]);
    output.copy_(input);
    gs->record(CollectiveKind::kAllToAllV, 0, 0);
    return internal::ready_work(what, output);
  }
  // Byte counts; c10d takes the split vectors by non-const reference and may move from
  // them, so pass fresh copies.
  std::vector<int64_t> in_b(n), out_b(n);
  for (int i = 0; i < n; ++i) {
    in_b[i] = input_splits[i] * row_bytes;
    out_b[i] = output_splits[i] * row_bytes;
    HYPER_CHECK_IMPLEMENTED(in_b[i] <= INT32_MAX && out_b[i] <= INT32_MAX, what,
                            ": pieces over 2 GiB are not supported by Gloo");
  }
  at::Tensor in_bytes = internal::as_bytes(input);
  at::Tensor out_bytes = internal::as_bytes(output);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  try {
    works.push_back(g.pg->all_to_all_single(out_bytes, in_bytes, out_b, in_b));
  } catch (const c10::Error& e) {
    rethrow_c10_error<CommError>(e, what);
  } catch (const std::exception& e) {
    rethrow_foreign_error(e, what);  // gloo::IoException at issue time
  }
  gs->record(CollectiveKind::kAllToAllV, sent, received);
  return internal::make_work(what, std::move(works), [output] { return output; },
                             {input, in_bytes, out_bytes});
}

at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits, const Group& group) {
  return all_to_all_v_async(input, input_splits, output_splits, group).wait();
}

}  // namespace hyper::comm
