// Differentiable collectives: torch::autograd::Function wrappers whose backward runs the
// adjoint collective. The Group travels in the autograd context as a capsule.
#include "hyper/comm/functional.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"

namespace hyper::comm::functional {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(Group g) : group(std::move(g)) {}
  Group group;
};

c10::IValue pack(const Group& g) {
  return c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(g));
}
Group unpack(const c10::IValue& v) {
  auto holder = v.toCapsule();
  return static_cast<GroupHolder*>(holder.get())->group;
}

struct AllGatherVFn : torch::autograd::Function<AllGatherVFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, c10::IValue group,
                            std::vector<int64_t> sizes) {
    Group g = unpack(group);
    at::Tensor out = comm::all_gather_v(input, g, sizes);
    ctx->saved_data["group"] = group;
    ctx->saved_data["sizes"] = c10::IValue(sizes);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Group g = unpack(ctx->saved_data["group"]);
    auto sizes = ctx->saved_data["sizes"].toIntVector();
    at::Tensor grad = comm::reduce_scatter_v(grads[0].contiguous(), sizes, ReduceOp::kSum, g);
    return {grad, at::Tensor(), at::Tensor()};
  }
};

struct AllToAllVFn : torch::autograd::Function<AllToAllVFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, c10::IValue group,
                            std::vector<int64_t> input_splits,
                            std::vector<int64_t> output_splits) {
    Group g = unpack(group);
    at::Tensor out = comm::all_to_all_v(input, input_splits, output_splits, g);
    ctx->saved_data["group"] = group;
    ctx->saved_data["in"] = c10::IValue(input_splits);
    ctx->saved_data["out"] = c10::IValue(output_splits);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Group g = unpack(ctx->saved_data["group"]);
    auto in = ctx->saved_data["in"].toIntVector();
    auto out = ctx->saved_data["out"].toIntVector();
    at::Tensor grad = comm::all_to_all_v(grads[0].contiguous(), out, in, g);
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterVFn : torch::autograd::Function<ReduceScatterVFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, c10::IValue group,
                            std::vector<int64_t> splits) {
    Group g = unpack(group);
    at::Tensor out = comm::reduce_scatter_v(input, splits, ReduceOp::kSum, g);
    ctx->saved_data["group"] = group;
    ctx->saved_data["splits"] = c10::IValue(splits);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Group g = unpack(ctx->saved_data["group"]);
    auto splits = ctx->saved_data["splits"].toIntVector();
    at::Tensor grad = comm::all_gather_v(grads[0].contiguous(), g, splits);
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_gather_v(const at::Tensor& input, const Group& group,
                        std::optional<std::vector<int64_t>> sizes) {
  // Settle the sizes in forward so that backward knows them without another exchange.
  std::vector<int64_t> s;
  if (sizes) {
    s = *sizes;
  } else {
    HYPER_CHECK_VALUE(input.dim() >= 1, "all_gather_v: input must have at least one dimension");
    s = group.size() == 1 ? std::vector<int64_t>{input.size(0)}
                          : internal::exchange_rows(input.contiguous(), group,
                                                    internal::describe("all_gather_v", group));
  }
  return AllGatherVFn::apply(input, pack(group), s);
}

at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits, const Group& group) {
  return AllToAllVFn::apply(input, pack(group), input_splits, output_splits);
}

at::Tensor reduce_scatter_v(const at::Tensor& input, const std::vector<int64_t>& splits,
                            const Group& group) {
  return ReduceScatterVFn::apply(input, pack(group), splits);
}

}  // namespace hyper::comm::functional
