// max.dim / min.dim / argmax / argmin of DTensor tensors (see maxdim_kernels.h).
#include "hyper/tensor/dispatch/maxdim_kernels.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/maxdim_rules.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/boundary_function.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum class Pick { kMax, kMin, kArgmax, kArgmin };

const char* name_of(Pick k) {
  switch (k) {
    case Pick::kMax: return "aten::max.dim";
    case Pick::kMin: return "aten::min.dim";
    case Pick::kArgmax: return "aten::argmax";
    case Pick::kArgmin: return "aten::argmin";
  }
  return "";
}

/// The index (keepdim) ATen's op picks along `d` of `t`.
at::Tensor pick_index(const at::Tensor& t, int64_t d, Pick k) {
  switch (k) {
    case Pick::kMax: return std::get<1>(at::max(t, d, true));
    case Pick::kMin: return std::get<1>(at::min(t, d, true));
    case Pick::kArgmax: return at::argmax(t, d, true);
    case Pick::kArgmin: return at::argmin(t, d, true);
  }
  return {};
}

/// `t` (any dtype) as bytes: a trailing dim of its item size.
at::Tensor as_bytes(const at::Tensor& t) { return t.unsqueeze(-1).contiguous().view(at::kByte); }
/// The inverse of as_bytes for the trailing bytes [from, from + itemsize of `type`).
at::Tensor from_bytes(const at::Tensor& b, int64_t from, at::ScalarType type) {
  return b.narrow(-1, from, c10::elementSize(type)).contiguous().view(type).squeeze(-1);
}

std::string where_of(Pick k, const at::Tensor& self, int64_t dim, bool keepdim) {
  return describe_args(name_of(k), {arg_layout(self)}) + " dim=" + std::to_string(dim) +
         " keepdim=" + (keepdim ? "true" : "false");
}

/// The values (undefined for argmax / argmin) and indices of rank `d.mesh_index()`, and the plan.
struct Local {
  at::Tensor values, indices;
  PickLayouts plan;
};

Local compute(Pick k, const at::Tensor& self, int64_t dim, bool keepdim) {
  const DTensor dt = dtensor_of(self);
  PickLayouts p = pick_layouts(where_of(k, self, dim, keepdim), dt.layout(), dim, keepdim);
  const DeviceMesh& mesh = dt.device_mesh();
  const int64_t idx = dt.mesh_index();
  const bool want_values = k == Pick::kMax || k == Pick::kMin;
  at::AutoDispatchBelowADInplaceOrView below;
  at::NoGradGuard no_grad;
  at::Tensor local = dt.to_local();
  if (p.in != dt.layout()) local = redistribute_local(local, mesh, dt.layout(), p.in);
  const int64_t d = p.dim;
  if (p.mesh_dims.empty()) {  // the local op: d is whole on every rank
    if (want_values) {
      auto r = k == Pick::kMax ? at::max(local, d, keepdim) : at::min(local, d, keepdim);
      return {std::get<0>(r), std::get<1>(r), p};
    }
    return {at::Tensor(), k == Pick::kArgmax ? at::argmax(local, d, keepdim)
                                             : at::argmin(local, d, keepdim), p};
  }
  // Each rank's winner along d, with its global index. A rank holding none of d picks from a
  // placeholder of one zero (so that ATen's dtype errors are raised on every rank alike) and
  // flags it.
  const Box box = p.in.local_box(idx);
  const int64_t off = box.offsets[d], n = box.sizes[d];
  Shape cshape = p.in.local_shape(idx);
  cshape[d] = 1;
  const at::Tensor src = n > 0 ? local : at::zeros(cshape, local.options());
  const at::Tensor li = pick_index(src, d, k);
  const at::Tensor cand = at::cat({as_bytes(src.gather(d, li)), as_bytes(li + off),
                                   at::full(cshape, n > 0 ? 1 : 0, local.options().dtype(at::kByte)).unsqueeze(-1)},
                                  -1);
  // The candidates as a tensor whose dim d has one entry per rank of the sharding mesh dims
  // (Shard(d) there, even: one each), gathered over those mesh dims.
  Shape gshape = p.in.shape();
  int64_t g = 1;
  for (int64_t m : p.mesh_dims) g *= p.in.mesh().size(m);
  gshape[d] = g;
  gshape.push_back(cand.size(-1));
  const at::Tensor all = redistribute_local(cand, mesh, Layout(p.in.mesh(), p.in.placements(), gshape),
                                            Layout(p.in.mesh(), p.gathered, gshape));
  const at::ScalarType type = local.scalar_type();
  const int64_t vb = c10::elementSize(type);
  at::Tensor v = from_bytes(all, 0, type), i = from_bytes(all, vb, at::kLong);
  // Candidate 0 (the first chunk of d) always holds elements; a flagged one becomes a copy of
  // it, which neither wins over a later real candidate nor changes the first index of a tie.
  const at::Tensor real = all.select(-1, vb + 8).to(at::kBool);
  v = at::where(real, v, v.narrow(d, 0, 1));
  i = at::where(real, i, i.narrow(d, 0, 1));
  const at::Tensor pos = pick_index(v, d, k);
  at::Tensor values = want_values ? v.gather(d, pos) : at::Tensor();
  at::Tensor indices = i.gather(d, pos);
  if (!keepdim) {
    if (want_values) values = values.squeeze(d);
    indices = indices.squeeze(d);
  }
  return {values, indices, p};
}

/// The plan of a forward, for its backward.
struct MaxDimState : torch::CustomClassHolder {
  PickLayouts plan;
  bool keepdim;
  MaxDimState(PickLayouts p, bool k) : plan(std::move(p)), keepdim(k) {}
};

struct MaxDimFn : public ::hyper::dispatch::BoundaryFunction<MaxDimFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                               bool keepdim, bool is_max) {
    const Pick k = is_max ? Pick::kMax : Pick::kMin;
    const DTensor dt = dtensor_of(self);
    Local r = compute(k, self, dim, keepdim);
    const at::Tensor values = wrap(r.values, dt, r.plan.out);
    const at::Tensor indices = wrap(r.indices, dt, r.plan.out);
    ctx->mark_non_differentiable({indices});
    ctx->save_for_backward({indices});
    ctx->saved_data["state"] =
        c10::IValue::make_capsule(c10::make_intrusive<MaxDimState>(std::move(r.plan), keepdim));
    ctx->saved_data["name"] = std::string(name_of(k));
    return {values, indices};
  }

  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    const at::Tensor g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const std::string name = ctx->saved_data["name"].toStringRef();
    const auto st = c10::static_intrusive_pointer_cast<MaxDimState>(ctx->saved_data["state"].toCapsule());
    const PickLayouts& p = st->plan;
    const at::Tensor indices = ctx->get_saved_variables()[0];
    HYPER_CHECK_IMPLEMENTED(!torch::autograd::GradMode::is_enabled(),
                            describe_args(name + " backward", {arg_layout(g), arg_layout(indices)}),
                            ": double backward (create_graph=true) through ", name,
                            " of a DTensor is not implemented (its backward scatters local "
                            "tensors, which autograd would not record)");
    const DTensor di = dtensor_of(indices);
    const PickGradLayouts gls =
        pick_grad_layouts(p, is_dtensor(g) ? std::optional<Placements>(dtensor_of(g).placements()) : std::nullopt);
    at::Tensor gl = local_as(g, gls.grad, di);  // dispatch_args.h
    at::Tensor il = di.to_local();
    const int64_t idx = di.mesh_index(), d = p.dim;
    const Layout& grad_layout = gls.input_grad;
    at::AutoDispatchBelowADInplaceOrView below;
    if (p.in.shape().empty()) return {wrap(gl.clone(), di, grad_layout), at::Tensor(), at::Tensor(), at::Tensor()};
    if (!st->keepdim) {
      gl = gl.unsqueeze(d);
      il = il.unsqueeze(d);
    }
    at::Tensor gin = at::zeros(p.in.local_shape(idx), gl.options());
    if (p.mesh_dims.empty()) {
      gin.scatter_(d, il, gl);
    } else {
      // Each rank writes the indices inside its own box of d (every output element's one
      // index lies in exactly one rank's box).
      const Box box = p.in.local_box(idx);
      const int64_t off = box.offsets[d], n = box.sizes[d];
      if (n > 0) {
        const at::Tensor mine = il.ge(off).logical_and_(il.lt(off + n));
        gin.scatter_(d, (il - off).clamp_(0, n - 1), at::where(mine, gl, at::zeros_like(gl)));
      }
    }
    return {wrap(gin, di, grad_layout), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> max_dim_autograd(const at::Tensor& self, int64_t dim, bool keepdim) {
  const variable_list r = MaxDimFn::apply(self, dim, keepdim, true);
  return {r[0], r[1]};
}
std::tuple<at::Tensor, at::Tensor> min_dim_autograd(const at::Tensor& self, int64_t dim, bool keepdim) {
  const variable_list r = MaxDimFn::apply(self, dim, keepdim, false);
  return {r[0], r[1]};
}

/// compute(), its local ops' c10::Errors (argmax of a bool tensor) as hyper's types.
Local compute_mapped(Pick k, const at::Tensor& self, int64_t dim, bool keepdim) {
  try {
    return compute(k, self, dim, keepdim);
  } catch (const c10::Error& e) {
    rethrow_local_error(e, where_of(k, self, dim, keepdim),
                        dtensor_of(self).device_mesh().get_rank());  // dispatch_args.h
  }
}

template <Pick K>
std::tuple<at::Tensor, at::Tensor> value_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  const DTensor dt = dtensor_of(self);
  Local r = compute_mapped(K, self, dim, keepdim);
  return {wrap(r.values, dt, r.plan.out), wrap(r.indices, dt, r.plan.out)};
}

template <Pick K>
at::Tensor arg_dim(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  if (!dim.has_value()) {
    // Over every element: the flat view (the view rule), then dim 0.
    at::Tensor r = K == Pick::kArgmax ? at::argmax(self.reshape({-1}), 0, false)
                                      : at::argmin(self.reshape({-1}), 0, false);
    if (keepdim) r = r.reshape(std::vector<int64_t>(static_cast<size_t>(self.dim()), 1));
    return r;
  }
  const DTensor dt = dtensor_of(self);
  Local r = compute_mapped(K, self, *dim, keepdim);
  return wrap(r.indices, dt, r.plan.out);
}

}  // namespace

const KernelFamily& maxdim_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"max.dim", /*serves_out=*/true, {
      HYPER_KERNEL("aten::max.dim", K::kDTensor, value_dim<Pick::kMax>),
      HYPER_KERNEL("aten::max.dim", K::kAutograd, max_dim_autograd),
      HYPER_KERNEL("aten::min.dim", K::kDTensor, value_dim<Pick::kMin>),
      HYPER_KERNEL("aten::min.dim", K::kAutograd, min_dim_autograd),
      HYPER_KERNEL("aten::argmax", K::kDTensor, arg_dim<Pick::kArgmax>),
      HYPER_KERNEL("aten::argmin", K::kDTensor, arg_dim<Pick::kArgmin>),
  }};
  return f;
}

}  // namespace hyper::dispatch
