// all_reduce: Gloo's native allreduce (ring) for the dtypes and ops Gloo implements; for the
// others (bool, bfloat16, int16, complex max/min...) every rank gathers all contributions
// point-to-point and reduces locally in rank order. avg = sum, then divide by the size.
#include <ATen/ATen.h>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"

namespace hyper::comm {

ReduceOp reduce_op_from_string(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg") return ReduceOp::kAvg;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  throw hyper::ValueError(
      hyper::internal::str_cat("unknown reduce op \"", name, "\" (expected sum, avg, max or min)"));
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

namespace {

// Dtypes reduced natively: ProcessGroupGloo's GENERATE_ALL_TYPES list; NCCL's data types
// add bfloat16. Neither has 16-bit integers, bool or complex (those gather and reduce locally).
bool reduces_natively(at::ScalarType t, bool nccl) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return true;
    case at::kBFloat16:
      return nccl;
    default:
      return false;
  }
}

}  // namespace

Work all_reduce_async(const at::Tensor& tensor, ReduceOp op, const Group& group,
                      std::optional<at::Tensor> output) {
  const auto& g = internal::checked_state(group, "all_reduce");
  const std::string what =
      internal::describe("all_reduce", group) + " op " + to_string(op);
  HYPER_CHECK_VALUE(tensor.defined(), what, ": tensor is undefined");
  internal::check_op_dtype(op, tensor, what);
  if (output) internal::check_given_output(*output, tensor, tensor.sizes().vec(), what, "tensor");
  if (auto device = internal::staging_device(g, tensor)) {
    Work host = all_reduce_async(tensor.to(at::kCPU), op, group);
    return output ? internal::copy_into(host, *output) : internal::result_to(host, *device);
  }
  const int n = static_cast<int>(g.ranks.size());
  auto* gs = const_cast<internal::GroupState*>(&g);
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  if (n == 1 || tensor.numel() == 0) {
    gs->record(CollectiveKind::kAllReduce, 0, 0);
    return internal::ready_work(
        what, output ? output->copy_(tensor) : tensor.clone(at::MemoryFormat::Contiguous));
  }
  // Native: NCCL for a CUDA tensor on an NCCL group (the dtypes NCCL reduces), Gloo for a host
  // tensor (the dtypes Gloo reduces); everything else takes the gather-and-reduce fallback.
  const bool on_nccl = g.device_memory && tensor.is_cuda();
  const bool native = on_nccl ? reduces_natively(tensor.scalar_type(), /*nccl=*/true)
                              : g.gloo != nullptr && tensor.is_cpu() &&
                                    reduces_natively(tensor.scalar_type(), /*nccl=*/false);
  if (native) {
    at::Tensor out = output ? output->copy_(tensor) : tensor.clone(at::MemoryFormat::Contiguous);
    c10d::AllreduceOptions opts;
    opts.reduceOp = op == ReduceOp::kMax   ? c10d::ReduceOp(c10d::ReduceOp::MAX)
                    : op == ReduceOp::kMin ? c10d::ReduceOp(c10d::ReduceOp::MIN)
                                           : c10d::ReduceOp(c10d::ReduceOp::SUM);
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    try {
      std::vector<at::Tensor> t{out};
      works.push_back(g.pg->allreduce(t, opts));
    } catch (const c10::Error& e) {
      rethrow_c10_error<CommError>(e, what);
    } catch (const std::exception& e) {
      rethrow_foreign_error(e, what);  // gloo::IoException at issue time
    }
    // Ring model (reduce-scatter + all-gather): 2 (n-1)/n of the tensor each way.
    const int64_t ring = 2 * (n - 1) * bytes / n;
    gs->record(CollectiveKind::kAllReduce, ring, ring);
    return internal::make_work(
        what, std::move(works),
        [out, op, n]() mutable {
          if (op == ReduceOp::kAvg) out.div_(n);
          return out;
        },
        {out});
  }
  // Fallback: gather every contribution (point-to-point, all in flight), reduce locally.
  const at::Tensor flat = tensor.contiguous().reshape({1, tensor.numel()});
  const std::vector<int64_t> rows(n, 1);
  Work gathered = internal::all_gather_v_impl(flat, group, rows, CollectiveKind::kAllReduce, what);
  const auto sizes = tensor.sizes().vec();
  Work reduced = internal::make_work(what, {}, [gathered, op, n, sizes]() {
    at::Tensor all = gathered.wait();
    return internal::reduce_pieces(all, n, op).reshape(sizes);
  });
  return output ? internal::copy_into(reduced, *output) : reduced;
}

at::Tensor all_reduce(const at::Tensor& tensor, ReduceOp op, const Group& group) {
  return all_reduce_async(tensor, op, group).wait();
}

}  // namespace hyper::comm
