// all_gather_v: variable-row all-gather. Routes (docs/comm.md):
//  - point-to-point: isend the local rows to every peer and irecv every peer's rows straight
//    into its slice of the output, all in flight at once (any backend);
//  - Gloo ring: gloo::allgatherv on the group's gloo::Context (hyper's Gloo subclass).
#include <ATen/ATen.h>

#include "hyper/comm/blocked_time.h"
#include "hyper/comm/c10_errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/gloo_group.h"
#include "hyper/comm/internal/state.h"
#include "hyper/core/plan_steps.h"  // kAllGatherRingMaxBytes: kAuto uses the ring up to it

namespace hyper::comm {

using internal::describe;

namespace internal {

// Exchanges (rows, row numel, dtype) so that every rank can size the output; checks that
// row sizes and dtypes agree. Small, blocking.
std::vector<int64_t> exchange_rows(const at::Tensor& input, const Group& group,
                                   const std::string& what) {
  const auto& g = checked_state(group, "all_gather_v");
  const int n = static_cast<int>(g.ranks.size());
  at::Tensor mine = at::tensor(
      {input.size(0), internal::row_numel(input), static_cast<int64_t>(input.scalar_type())},
      at::kLong);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int i = 0; i < n; ++i) out[0].push_back(at::empty({3}, at::kLong));
  std::vector<at::Tensor> in{mine};
  try {
    internal::BlockedScope blocked;
    g.pg->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    throw CommError(what + ": exchanging row counts: " + message_of(e));
  }
  std::vector<int64_t> rows(n);
  for (int i = 0; i < n; ++i) {
    const int64_t* v = out[0][i].data_ptr<int64_t>();
    rows[i] = v[0];
    HYPER_CHECK_VALUE(v[1] == internal::row_numel(input), what, ": rank ", g.ranks[i],
                      " has rows of ", v[1], " elements but this rank's have ",
                      internal::row_numel(input));
    HYPER_CHECK_VALUE(v[2] == static_cast<int64_t>(input.scalar_type()), what, ": rank ",
                      g.ranks[i], " has dtype ", static_cast<c10::ScalarType>(v[2]),
                      " but this rank has ", input.scalar_type());
  }
  return rows;
}

}  // namespace internal

void set_all_gather_route(const Group& group, AllGatherRoute route) {
  auto& g = const_cast<internal::GroupState&>(
      internal::checked_state(group, "set_all_gather_route"));
  HYPER_CHECK_IMPLEMENTED(route != AllGatherRoute::kGlooRing || g.gloo != nullptr,
                          "set_all_gather_route: group ", group.to_string(),
                          " is not hyper's Gloo group; the Gloo ring route needs it");
  g.route.store(route);
}

namespace internal {
Work all_gather_v_impl(const at::Tensor& input_, const Group& group,
                       std::optional<std::vector<int64_t>> sizes, CollectiveKind kind,
                       const std::string& what, std::optional<at::Tensor> given_output) {
  const auto& g = internal::checked_state(group, "all_gather_v");
  HYPER_CHECK_VALUE(input_.defined(), what, ": input is undefined");
  HYPER_CHECK_VALUE(input_.dim() >= 1, what, ": input must have at least one dimension");
  // A given output is checked up front when the sizes are known (so a bad one throws before
  // anything is sent); without sizes, after the row-count exchange every rank makes.
  if (given_output && sizes) {
    int64_t total = 0;
    for (int64_t r : *sizes) total += r;
    internal::check_given_output(*given_output, input_, internal::with_rows(input_, total), what);
  }
  if (auto device = internal::staging_device(g, input_)) {
    Work host = all_gather_v_impl(input_.to(at::kCPU), group, std::move(sizes), kind, what);
    return given_output ? internal::copy_into(host, *given_output)
                        : internal::result_to(host, *device);
  }
  const at::Tensor input = input_.contiguous();
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.rank;
  std::vector<int64_t> rows =
      sizes ? *sizes : (n == 1 ? std::vector<int64_t>{input.size(0)}
                               : exchange_rows(input, group, what));
  internal::check_splits(rows, n, -1, what, "sizes");
  HYPER_CHECK_VALUE(rows[me] == input.size(0), what, ": sizes[", me, "] = ", rows[me],
                    " but the input has ", input.size(0), " rows");
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  if (given_output && !sizes)  // (with sizes it was checked above)
    internal::check_given_output(*given_output, input, internal::with_rows(input, total), what);
  at::Tensor output = given_output ? *given_output
                                   : at::empty(internal::with_rows(input, total), input.options());
  const int64_t row_bytes = internal::row_numel(input) * input.element_size();
  const int64_t in_bytes = rows[me] * row_bytes;
  if (n == 1) {
    output.copy_(input);
    const_cast<internal::GroupState&>(g).record(kind, 0, 0);
    return internal::ready_work(what, output);
  }
  auto* gs = const_cast<internal::GroupState*>(&g);
  AllGatherRoute route = g.route.load();
  if (route == AllGatherRoute::kAuto) {
    // Measured (docs/comm.md): the ring's single Gloo work wins on small messages (less
    // per-message overhead), point-to-point wins clearly on large ones (one step, not n-1).
    route = g.gloo != nullptr && total * row_bytes <= kAllGatherRingMaxBytes ? AllGatherRoute::kGlooRing
                                                                    : AllGatherRoute::kPointToPoint;
  }
  // The ring runs on the group's Gloo context: host memory only (a CUDA tensor here is on an
  // NCCL group, which moves it point-to-point).
  if (!input.is_cpu()) route = AllGatherRoute::kPointToPoint;

  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  if (route == AllGatherRoute::kGlooRing) {
    std::vector<size_t> counts(n);
    for (int i = 0; i < n; ++i) counts[i] = static_cast<size_t>(rows[i] * row_bytes);
    at::Tensor in_b = internal::as_bytes(input);
    at::Tensor out_b = internal::as_bytes(output);
    try {
      works.push_back(g.gloo->allgatherv_bytes(out_b, in_b, counts));
    } catch (const c10::Error& e) {
      rethrow_c10_error<CommError>(e, what);
    } catch (const std::exception& e) {
      rethrow_foreign_error(e, what);  // gloo::IoException at issue time
    }
    // Ring: rank r forwards every piece except that of its right neighbour, and receives
    // every piece except its own.
    gs->record(kind, (total - rows[(me + 1) % n]) * row_bytes,
               (total - rows[me]) * row_bytes);
    return internal::make_work(what, std::move(works), [output] { return output; },
                               {input, in_b, out_b});
  }

  // Point-to-point: every send and receive in flight at once.
  const int tag = gs->next_p2p_tag();
  std::vector<at::Tensor> keep{input, output};
  works = internal::issue_point_to_point(g, input.is_cuda(), what, [&](internal::C10dWorks& ws) {
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t r = rows[i];
      if (i == me) {
        output.narrow(0, offset, r).copy_(input);
      } else {
        if (in_bytes > 0) {
          std::vector<at::Tensor> t{input};
          ws.push_back(g.pg->send(t, i, tag));
        }
        if (r > 0) {
          std::vector<at::Tensor> t{output.narrow(0, offset, r)};
          ws.push_back(g.pg->recv(t, i, tag));
        }
      }
      offset += r;
    }
  });
  gs->record(kind, in_bytes * (n - 1), (total - rows[me]) * row_bytes);
  return internal::make_work(what, std::move(works), [output] { return output; },
                             std::move(keep));
}

}  // namespace internal

Work all_gather_v_async(const at::Tensor& input, const Group& group,
                        std::optional<std::vector<int64_t>> sizes,
                        std::optional<at::Tensor> output) {
  return internal::all_gather_v_impl(input, group, std::move(sizes), CollectiveKind::kAllGatherV,
                                     describe("all_gather_v", group), std::move(output));
}

at::Tensor all_gather_v(const at::Tensor& input, const Group& group,
                        std::optional<std::vector<int64_t>> sizes) {
  return all_gather_v_async(input, group, std::move(sizes)).wait();
}

}  // namespace hyper::comm
