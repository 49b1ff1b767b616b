// Ops written as ops that have sharding rules, at both DTensor keys (see decompositions.h).
#include "hyper/tensor/dispatch/decompositions.h"

#include <ATen/ATen.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/decomposition_rules.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

// ---- norms -----------------------------------------------------------------------------------

at::Tensor norm_opt_dim(const at::Tensor& self, const std::optional<at::Scalar>& p,
                        at::IntArrayRef dim, bool keepdim) {
  return at::linalg_vector_norm(self, p.value_or(2), dim, keepdim);
}
at::Tensor norm_opt_dtype(const at::Tensor& self, const std::optional<at::Scalar>& p,
                          at::ScalarType dtype) {
  return at::linalg_vector_norm(self, p.value_or(2), std::nullopt, false, dtype);
}
at::Tensor norm_opt_dim_dtype(const at::Tensor& self, const std::optional<at::Scalar>& p,
                              at::IntArrayRef dim, bool keepdim, at::ScalarType dtype) {
  return at::linalg_vector_norm(self, p.value_or(2), dim, keepdim, dtype);
}
at::Tensor dist(const at::Tensor& self, const at::Tensor& other, const at::Scalar& p) {
  return at::linalg_vector_norm(self - other, p);
}

// ---- statistics ------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction,
                                            bool keepdim) {
  return {at::var(self, dim, correction, keepdim), at::mean(self, dim, keepdim)};
}
std::tuple<at::Tensor, at::Tensor> std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction,
                                            bool keepdim) {
  return {at::std(self, dim, correction, keepdim), at::mean(self, dim, keepdim)};
}
std::tuple<at::Tensor, at::Tensor> aminmax(const at::Tensor& self, std::optional<int64_t> dim,
                                           bool keepdim) {
  if (!dim) return {at::amin(self, {}, keepdim), at::amax(self, {}, keepdim)};
  return {at::amin(self, {*dim}, keepdim), at::amax(self, {*dim}, keepdim)};
}
at::Tensor count_nonzero_dims(const at::Tensor& self, at::IntArrayRef dim) {
  return self.ne(0).sum(dim);
}
at::Tensor count_nonzero(const at::Tensor& self, std::optional<int64_t> dim) {
  return dim ? self.ne(0).sum(*dim) : self.ne(0).sum();
}
/// nansum: the sum with NaNs read as 0 (masked_fill and sum have rules; a sharded reduced dim
/// gives a Partial(sum), as sum's rule says).
at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
  return at::sum(self.masked_fill(at::isnan(self), 0), dim, keepdim, dtype);
}

// ---- comparisons to a bool ---------------------------------------------------------------------

bool equal(const at::Tensor& self, const at::Tensor& other) {
  if (self.sizes() != other.sizes()) return false;
  return self.eq(other).all().item<bool>();
}
bool allclose(const at::Tensor& self, const at::Tensor& other, double rtol, double atol,
              bool equal_nan) {
  return at::isclose(self, other, rtol, atol, equal_nan).all().item<bool>();
}

// ---- products and shapes -----------------------------------------------------------------------

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  HYPER_CHECK_VALUE(self.dim() == 2 && vec.dim() == 1, describe_tensors("aten::mv", {self, vec}),
                    ": vector + matrix @ vector expected, got ", self.dim(), ", ", vec.dim());
  return at::mm(self, vec.unsqueeze(1)).squeeze(1);
}

at::Tensor repeat(const at::Tensor& self, c10::SymIntArrayRef repeats_sym) {
  const std::vector<int64_t> reps = C10_AS_INTARRAYREF_SLOW(repeats_sym).vec();
  const auto n = static_cast<int64_t>(reps.size());
  HYPER_CHECK_VALUE(n >= self.dim(), describe_tensors("aten::repeat", {self}),
                    ": Number of dimensions of repeat dims can not be smaller than number of "
                    "dimensions of tensor (", n, " < ", self.dim(), ")");
  for (int64_t r : reps)
    HYPER_CHECK_VALUE(r >= 0, describe_tensors("aten::repeat", {self}), ": negative repeat ", r);
  std::vector<int64_t> shape(static_cast<size_t>(n - self.dim()), 1);
  for (int64_t s : self.sizes()) shape.push_back(s);
  std::vector<int64_t> pairs, expanded, out;
  for (int64_t i = 0; i < n; ++i) {
    pairs.insert(pairs.end(), {1, shape[i]});
    expanded.insert(expanded.end(), {reps[i], shape[i]});
    out.push_back(reps[i] * shape[i]);
  }
  return self.reshape(pairs).expand(expanded).reshape(out);
}

at::Tensor constant_pad_nd(const at::Tensor& self, c10::SymIntArrayRef pad_sym, const at::Scalar& value) {
  const std::vector<int64_t> pad = C10_AS_INTARRAYREF_SLOW(pad_sym).vec();
  const std::string w = describe_tensors("aten::constant_pad_nd", {self});
  const auto ndim = self.dim();
  HYPER_CHECK_VALUE(pad.size() % 2 == 0, w, ": Length of pad must be even but instead it equals ",
                    pad.size());
  HYPER_CHECK_VALUE(static_cast<int64_t>(pad.size() / 2) <= ndim, w,
                    ": Length of pad should be no more than twice the number of dimensions of the "
                    "input. Pad length is ", pad.size(), " while the input has ", ndim, " dimensions.");
  at::Tensor x = self;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = ndim - 1 - static_cast<int64_t>(k);
    const int64_t before = pad[2 * k], after = pad[2 * k + 1];
    const int64_t size = x.size(d) + before + after;
    HYPER_CHECK_VALUE(size >= 0, w, ": the padded size of dim ", d, " is ", size, " (size ",
                      self.size(d), ", pad ", before, ", ", after, "); it must be >= 0");
    if (before < 0) x = x.narrow(d, -before, x.size(d) + before);
    if (after < 0) x = x.narrow(d, 0, x.size(d) + after);
    std::vector<at::Tensor> parts;
    // A block of the value in x's layout (a Shard of d Replicate), so that cat keeps x's
    // Shards of other dims and its Partial (R -> P is local: the value on coordinate 0 of a
    // Partial(sum)) instead of gathering x to the block's Replicate.
    auto block = [&](int64_t len) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape[static_cast<size_t>(d)] = len;
      at::Tensor b = x.new_full(shape, value);
      const DTensor dx = dtensor_of(x);
      const std::optional<Placements> ps = pad_block_placements(dx.layout(), d);  // decomposition_rules.h
      if (ps && *ps != dtensor_of(b).placements())
        b = wrap_dtensor(dtensor_of(b).redistribute(dx.device_mesh(), *ps));
      return b;
    };
    if (before > 0) parts.push_back(block(before));
    parts.push_back(x);
    if (after > 0) parts.push_back(block(after));
    if (parts.size() > 1) x = at::cat(parts, d);
  }
  return x.is_same(self) ? self.clone() : x;
}

at::Tensor glu(const at::Tensor& self, int64_t dim) {
  const std::string w = describe_tensors("aten::glu", {self});
  HYPER_CHECK_VALUE(self.dim() > 0, w, ": glu does not support scalars because halving size must be even");
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  HYPER_CHECK_VALUE(self.size(d) % 2 == 0, w, ": Halving dimension must be even, but dimension ",
                    d, " is size ", self.size(d));
  const int64_t h = self.size(d) / 2;
  return self.narrow(d, 0, h) * at::sigmoid(self.narrow(d, h, h));
}

// ---- data-dependent selections -------------------------------------------------------------

at::Tensor median_all(const at::Tensor& self) {
  if (self.numel() == 0) return self.new_full({}, std::numeric_limits<double>::quiet_NaN());
  return std::get<0>(self.reshape({-1}).median(0));
}
at::Tensor nanmedian_all(const at::Tensor& self) {
  if (self.numel() == 0) return self.new_full({}, std::numeric_limits<double>::quiet_NaN());
  return std::get<0>(self.reshape({-1}).nanmedian(0));
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  HYPER_CHECK_VALUE(mask.scalar_type() == at::kBool, describe_tensors("aten::masked_select", {self, mask}),
                    ": masked_select expects a bool mask, got ", c10::toString(mask.scalar_type()));
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  c10::List<std::optional<at::Tensor>> idx;
  idx.push_back(mask.expand(shape));
  return at::index(self.expand(shape), idx);
}

// ---- trace, cdist ----------------------------------------------------------------------------

/// The sum of self[i, i]: advanced indexing by two aranges (a masked Partial(sum) of
/// min(n, m) values where self is sharded, no gather), then sum.
at::Tensor trace(const at::Tensor& self) {
  HYPER_CHECK_VALUE(self.dim() == 2, describe_tensors("aten::trace", {self}),
                    ": expected a matrix, but got tensor with dim ", self.dim());
  const at::Tensor i = at::arange(std::min(self.size(0), self.size(1)),
                                  at::TensorOptions().dtype(at::kLong).device(self.device()));
  c10::List<std::optional<at::Tensor>> idx;
  idx.push_back(i);
  idx.push_back(i);
  return at::index(self, idx).sum();
}

/// cdist as ATen computes it: for p = 2 with more than 25 rows on a side (or
/// compute_mode 1) the matrix-product form of `_euclidean_dist` (|a|^2 + |b|^2 - 2 a.b,
/// clamped at 1e-30, square root), else the norm of every pairwise difference
/// ([.., P, R, M] in memory, as ATen's direct kernel reads it).
at::Tensor cdist(const at::Tensor& x1, const at::Tensor& x2, double p,
                 std::optional<int64_t> compute_mode) {
  auto w = [&] { return describe_tensors("aten::cdist", {x1, x2}); };
  HYPER_CHECK_VALUE(at::isFloatingType(x1.scalar_type()) && at::isFloatingType(x2.scalar_type()),
                    w(), ": cdist only supports floating-point dtypes, got ",
                    c10::toString(x1.scalar_type()), " and ", c10::toString(x2.scalar_type()));
  HYPER_CHECK_VALUE(x1.dim() >= 2 && x2.dim() >= 2, w(), ": cdist only supports at least 2D "
                    "tensors, got ", x1.dim(), "D and ", x2.dim(), "D");
  HYPER_CHECK_VALUE(x1.size(-1) == x2.size(-1), w(), ": X1 and X2 must have the same number of "
                    "columns. X1: ", x1.size(-1), " X2: ", x2.size(-1));
  HYPER_CHECK_VALUE(p >= 0, w(), ": cdist only supports non-negative p values, got ", p);
  const int64_t mode = compute_mode.value_or(0);
  HYPER_CHECK_VALUE(mode >= 0 && mode <= 2, w(), ": possible modes: 0, 1, 2, but was: ", mode);
  HYPER_CHECK_IMPLEMENTED(p != 0, w(), ": cdist with p = 0 (a count of differing coordinates) "
                          "is not implemented for a DTensor");
  const int64_t r1 = x1.size(-2), r2 = x2.size(-2);
  const bool empty = x1.numel() == 0 || x2.numel() == 0;  // ATen: always the direct form
  if (!empty && p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))) {
    const at::Tensor n1 = x1.pow(2).sum(-1, /*keepdim=*/true);
    const at::Tensor n2 = x2.pow(2).sum(-1, /*keepdim=*/true);
    const at::Tensor a = at::cat({x1 * -2, n1, at::ones_like(n1)}, -1);
    const at::Tensor b = at::cat({x2, at::ones_like(n2), n2}, -1);
    return at::matmul(a, b.transpose(-1, -2)).clamp_min(1e-30).sqrt();
  }
  return at::linalg_vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, {-1});
}

// ---- embedding_bag ------------------------------------------------------------------------------

/// embedding_bag as ops with rules: the bags' rows looked up by at::embedding (a row-sharded
/// table gives a masked Partial(sum), a column-sharded one Shard(1)), weighted, then summed per
/// bag by index_add (sum, mean: / the bag's count) or, for max, the elements at each bag's first
/// maximum picked by gather (the gradient goes to them alone, as ATen's; empty bags 0). The indices and offsets are made whole (plain). The other outputs (plain) as ATen's
/// CPU kernel gives them, except that offset2bag (the bag of each index) is always filled
/// (ATen leaves it empty for sum without padding): bag_size (the count of non-padding indices;
/// zeros for sum), max_indices (max: the row of each bag's first maximum per column; mean:
/// bag_size; sum: zeros).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag_padding(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse,
    const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    std::optional<int64_t> padding_idx) {
  const std::optional<at::Tensor>& psw = per_sample_weights;
  auto w = [&] { return describe_tensors("aten::embedding_bag", {weight, indices, offsets, psw}); };
  HYPER_CHECK_VALUE(weight.dim() == 2, w(), ": the weight must be 2-D, got ", weight.dim(), " dims");
  HYPER_CHECK_VALUE(indices.dim() == 1 && offsets.dim() == 1, w(), ": indices and offsets must be "
                    "1-D, got ", indices.dim(), " and ", offsets.dim(), " dims");
  HYPER_CHECK_VALUE(mode >= 0 && mode <= 2, w(), ": mode must be 0 (sum), 1 (mean) or 2 (max), got ",
                    mode);
  HYPER_CHECK_VALUE(!(psw && psw->defined()) || mode == 0, w(), ": per_sample_weights is only "
                    "supported for mode='sum' (got mode ", mode, ")");
  HYPER_CHECK_IMPLEMENTED(!sparse, w(), ": sparse gradients of a DTensor weight are not implemented");
  HYPER_CHECK_IMPLEMENTED(!scale_grad_by_freq, w(), ": scale_grad_by_freq with a DTensor is not "
                          "implemented");
  for (const at::Tensor* t : {&indices, &offsets})
    HYPER_CHECK_VALUE(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt, w(),
                      ": indices and offsets must be int64 or int32, got ",
                      c10::toString(t->scalar_type()));
  const at::Tensor idx = whole(indices).to(at::kLong), offs = whole(offsets).to(at::kLong);
  const at::TensorOptions longs = idx.options();  // int64 on the indices' device
  const int64_t n = idx.numel(), rows = weight.size(0), cols = weight.size(1);
  const int64_t bags = offs.numel() - (include_last_offset ? 1 : 0);
  HYPER_CHECK_VALUE(bags >= 0, w(), ": include_last_offset needs at least one offset");
  if (offs.numel() > 0) {
    const int64_t first = offs[0].item<int64_t>(), last = offs.max().item<int64_t>();
    HYPER_CHECK_VALUE(first == 0, w(), ": offsets[0] has to be 0 (the first bag starts at index "
                      "0), got ", first);
    HYPER_CHECK_VALUE(last <= n, w(), ": an offset ", last, " is past the ", n, " indices");
    HYPER_CHECK_VALUE(offs.numel() < 2 || offs.diff().ge(0).all().item<bool>(), w(),
                      ": offsets must be non-decreasing");
    // (ATen's CPU kernel is inconsistent past the last offset: sum ignores those indices,
    // mean counts them, max reads them; the documented contract is CSR.)
    const int64_t end = offs[offs.numel() - 1].item<int64_t>();
    HYPER_CHECK_VALUE(!include_last_offset || end == n, w(), ": with include_last_offset the "
                      "last offset must equal the number of indices (CSR), got ", end, " of ", n);
  }
  if (n > 0) {
    const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
    HYPER_CHECK_VALUE(lo >= 0 && hi < rows, w(), ": an index is out of range [0, ", rows, "): ",
                      lo < 0 ? lo : hi);
  }
  if (psw && psw->defined())
    HYPER_CHECK_VALUE(psw->sizes() == indices.sizes() && psw->scalar_type() == weight.scalar_type(),
                      w(), ": per_sample_weights must have the indices' shape ", indices.sizes(),
                      " and the weight's dtype, got ", psw->sizes(), " ",
                      c10::toString(psw->scalar_type()));
  std::optional<int64_t> pad;
  if (padding_idx) {
    HYPER_CHECK_VALUE(*padding_idx >= -rows && *padding_idx < rows, w(), ": padding_idx ",
                      *padding_idx, " must be within the ", rows, " embeddings");
    pad = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  const at::TensorOptions floats = at::TensorOptions().dtype(weight.scalar_type()).device(weight.device());
  if (bags == 0)
    return {at::zeros({0, cols}, floats), at::zeros({n}, longs), at::zeros({0}, longs),
            at::zeros({0}, longs)};
  // The bag of each index: 1 at every later bag's start, cumulated.
  const at::Tensor starts = offs.slice(0, 1, bags);
  const at::Tensor bag = at::zeros({n + 1}, longs)
                             .index_add_(0, starts, at::ones_like(starts))
                             .slice(0, 0, n)
                             .cumsum(0);
  at::Tensor keep = at::ones({n}, longs.dtype(at::kBool));
  if (pad) keep = idx.ne(*pad);
  const at::Tensor count = at::zeros({bags}, longs).index_add_(0, bag, keep.to(at::kLong));
  at::Tensor emb = at::embedding(weight, idx);
  const at::Tensor keep_col = keep.unsqueeze(1);
  at::Tensor out;
  at::Tensor max_indices = at::zeros({bags}, longs);
  if (mode == 2) {
    // The first index of each bag reaching its maximum, per column (n where none does: an
    // empty bag), found on the whole values; the output picks those elements, so the gradient
    // goes to them alone, as ATen's.
    at::Tensor first;
    {
      at::NoGradGuard no_grad;
      const at::Tensor e = whole(emb.detach()).masked_fill(keep_col.logical_not(),
                                                          -std::numeric_limits<double>::infinity());
      const at::Tensor bagx = bag.unsqueeze(1).expand({n, cols});
      const at::Tensor top = at::zeros({bags, cols}, e.options())
                                 .scatter_reduce(0, bagx, e, "amax", /*include_self=*/false);
      const at::Tensor hit = e.eq(top.index_select(0, bag)).logical_and(keep_col);
      const at::Tensor pos = at::where(hit, at::arange(n, longs).unsqueeze(1), n);
      first = at::full({bags, cols}, n, longs).scatter_reduce(0, bagx, pos, "amin");
    }
    out = at::gather(at::cat({emb, at::zeros({1, cols}, floats)}), 0, first);
    max_indices = at::cat({idx, at::zeros({1}, longs)}).index_select(0, first.reshape(-1))
                      .reshape(first.sizes());
  } else {
    at::Tensor x = emb;
    if (psw && psw->defined()) x = x * psw->reshape({n, 1});
    if (pad) x = x * keep_col.to(weight.scalar_type());
    out = at::zeros({bags, cols}, floats).index_add(0, bag, x);
    if (mode == 1) out = out / count.clamp_min(1).unsqueeze(1).to(weight.scalar_type());
    if (mode == 1) max_indices = count;
  }
  const at::Tensor bag_size = mode == 0 ? at::zeros({bags}, longs) : count;
  return {out, bag, bag_size, max_indices};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse,
    const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset) {
  return embedding_bag_padding(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                               per_sample_weights, include_last_offset, std::nullopt);
}

/// nonzero: the indices depend on every element, so the input is gathered (its full tensor
/// on every rank: the bytes of the tensor) and the [n, dim] result is Replicate.
at::Tensor nonzero(const at::Tensor& self) {
  const DTensor d = dtensor_of(self);
  at::Tensor idx;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    idx = at::nonzero(d.full_tensor());
  }
  const Placements ps(static_cast<size_t>(d.device_mesh().ndim()), Replicate());
  return wrap_dtensor(DTensor::from_local_with_layout(
      idx, d.device_mesh(), Layout(d.layout().mesh(), ps, idx.sizes().vec()), d.plan_cache()));
}

/// histc: ATen's range (min == max: the data's global min and max, then +-1 if equal) and each
/// rank's histogram of its own elements: Partial(sum) over the mesh dims that shard self, no
/// gather (a Partial self is reduced first: counts of a sum are not sums of counts).
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  const std::string w = describe_tensors("aten::histc", {self});
  HYPER_CHECK_VALUE(bins > 0, w, ": bins must be > 0, got ", bins);
  double lo = min.toDouble(), hi = max.toDouble();
  HYPER_CHECK_VALUE(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, w,
                    ": the range [min, max] must be finite with min <= max, got min=", lo, " max=", hi);
  if (lo == hi && self.numel() > 0) {
    lo = self.min().item<double>();
    hi = self.max().item<double>();
    HYPER_CHECK_VALUE(std::isfinite(lo) && std::isfinite(hi), w, ": range of [", lo, ", ", hi,
                      "] is not finite");
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  const DTensor d = dtensor_of(self);
  const Layout src = partials_replicated(d.layout());
  const at::Tensor local = local_as(self, src, d);
  at::Tensor h;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    h = at::histc(local, bins, lo, hi);
  }
  return wrap(h, d, counts_layout(src, {bins}));
}

/// bincount: the length max(global max + 1, minlength), each rank's counts (weighted by the
/// weights laid out as self) of its own elements: Partial(sum) over the mesh dims that shard
/// self.
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                    c10::SymInt minlength_sym) {
  const bool weighted = weights && weights->defined();
  const std::string w = weighted ? describe_tensors("aten::bincount", {self, *weights}) : describe_tensors("aten::bincount", {self});
  HYPER_CHECK_IMPLEMENTED(is_dtensor(self), w, ": bincount of a plain tensor with DTensor weights");
  const int64_t minlength = minlength_sym.expect_int();
  HYPER_CHECK_VALUE(self.dim() == 1 && at::isIntegralType(self.scalar_type(), /*includeBool=*/false), w,
                    ": bincount only supports 1-d non-negative integral inputs, got ", self.dim(),
                    " dims of ", c10::toString(self.scalar_type()));
  HYPER_CHECK_VALUE(minlength >= 0, w, ": minlength should be >= 0, got ", minlength);
  HYPER_CHECK_VALUE(!weighted || weights->sizes() == self.sizes(), w,
                    ": weights should be 1-d and have the same length as input");
  int64_t n = minlength;
  if (self.numel() > 0) {
    const int64_t lo = self.min().item<int64_t>(), hi = self.max().item<int64_t>();
    HYPER_CHECK_VALUE(lo >= 0, w, ": bincount only supports non-negative inputs, found ", lo);
    n = std::max(n, hi + 1);
  }
  const DTensor d = dtensor_of(self);
  const Layout src = partials_replicated(d.layout());
  const at::Tensor local = local_as(self, src, d);
  const at::Tensor lw = weighted ? local_as(*weights, src, d) : at::Tensor();
  at::Tensor c;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    c = at::bincount(local, lw, n);
  }
  return wrap(c, d, counts_layout(src, {n}));
}

/// searchsorted / bucketize: elementwise in the values given the sorted sequence. The sequence
/// (and a sorter) made whole (plain: gathered where a DTensor, small); the values keep their
/// layout, a Partial reduced first (the position of a sum is not a sum of positions); an N-D
/// sequence (one sorted row per leading index of the values) cut to the rows of this rank's
/// box. No bytes when the values are not Partial and the sequence is plain or Replicate. A
/// plain values tensor beside a DTensor sequence: the global answer, Replicate.
at::Tensor sorted_search(const std::string& name, const at::Tensor& seq, const at::Tensor& self,
                         bool out_int32, bool right, std::optional<c10::string_view> side,
                         const std::optional<at::Tensor>& sorter) {
  const bool sorted_by = sorter && sorter->defined();
  auto w = [&] { return describe_tensors(name, {seq, self, sorter}); };
  HYPER_CHECK_VALUE(seq.dim() > 0, w(), ": the boundaries should have a positive number of dims, "
                    "got a 0-dim tensor");
  HYPER_CHECK_VALUE(seq.dim() == 1 || (seq.dim() == self.dim() &&
                                       seq.sizes().slice(0, seq.dim() - 1) ==
                                           self.sizes().slice(0, self.dim() - 1)),
                    w(), ": the boundaries should be 1-D, or their first N-1 dims must match the "
                    "values' (got boundaries ", seq.sizes(), " and values ", self.sizes(), ")");
  HYPER_CHECK_VALUE(!sorted_by || sorter->sizes() == seq.sizes(), w(), ": the sorter's shape ",
                    sorted_by ? sorter->sizes() : seq.sizes(), " must be the boundaries' ",
                    seq.sizes());
  at::Tensor s = whole(seq), so = sorted_by ? whole(*sorter) : at::Tensor();
  if (so.defined()) {  // on the whole sorter: every rank decides alike (ATen checks its rows)
    HYPER_CHECK_VALUE(so.scalar_type() == at::kLong, w(), ": the sorter must be int64, got ",
                      so.scalar_type());
    if (so.numel() > 0) {
      const auto [mn, mx] = at::aminmax(so);
      const int64_t lo = mn.item<int64_t>(), hi = mx.item<int64_t>(), n = s.size(-1);
      HYPER_CHECK_VALUE(lo >= 0 && hi < n, w(), ": the sorter's indices must be in [0, ", n,
                        "), got ", lo < 0 ? lo : hi);
    }
  }
  auto search = [&](const at::Tensor& sl, const at::Tensor& vl, const at::Tensor& sol) {
    at::AutoDispatchBelowADInplaceOrView below;
    return at::searchsorted(sl, vl, out_int32, right, side,
                            sol.defined() ? std::optional<at::Tensor>(sol) : std::nullopt);
  };
  if (!is_dtensor(self)) {  // the sequence (or the sorter) is the DTensor
    const DTensor ref = is_dtensor(seq) ? dtensor_of(seq) : dtensor_of(*sorter);
    const at::Tensor r = search(s, self, so);
    const Placements rep(static_cast<size_t>(ref.device_mesh().ndim()), Replicate());
    return wrap(r, ref, Layout(ref.layout().mesh(), rep, r.sizes().vec()));
  }
  const DTensor d = dtensor_of(self);
  HYPER_CHECK_IMPLEMENTED(!d.layout().is_ragged() || s.dim() == 1, w(), ": N-D boundaries beside "
                          "a RaggedShard values tensor (its local is a flat interval)");
  const Layout src = partials_replicated(d.layout());
  if (s.dim() > 1) {  // this rank's rows of the boundaries (and of the sorter)
    const Box b = src.local_box(d.mesh_index());
    for (int64_t k = 0; k + 1 < s.dim(); ++k) {
      s = s.narrow(k, b.offsets[k], b.sizes[k]);
      if (so.defined()) so = so.narrow(k, b.offsets[k], b.sizes[k]);
    }
  }
  return wrap(search(s, local_as(self, src, d), so), d, src);
}

/// `s` as a 0-dim wrapped number on `like`'s device (ATen's form of a Scalar operand).
at::Tensor wrapped_on(const at::Scalar& s, const at::Tensor& like) {
  at::Tensor t = c10::scalar_to_tensor(s, like.device());
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

at::Tensor searchsorted(const at::Tensor& seq, const at::Tensor& self, bool out_int32, bool right,
                        std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return sorted_search("aten::searchsorted.Tensor", seq, self, out_int32, right, side, sorter);
}
at::Tensor searchsorted_scalar(const at::Tensor& seq, const at::Scalar& self, bool out_int32,
                               bool right, std::optional<c10::string_view> side,
                               const std::optional<at::Tensor>& sorter) {
  // A wrapped number, as ATen's: promoted with the boundaries (2.5 among int64 boundaries).
  return sorted_search("aten::searchsorted.Scalar", seq, wrapped_on(self, seq), out_int32, right,
                       side, sorter);
}
at::Tensor bucketize(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  HYPER_CHECK_VALUE(boundaries.dim() == 1, describe_tensors("aten::bucketize.Tensor", {self, boundaries}),
                    ": the boundaries must be 1-D, got ", boundaries.dim(), " dims");
  return sorted_search("aten::bucketize.Tensor", boundaries, self, out_int32, right, std::nullopt,
                       std::nullopt);
}
at::Tensor bucketize_scalar(const at::Scalar& self, const at::Tensor& boundaries, bool out_int32,
                            bool right) {
  HYPER_CHECK_VALUE(boundaries.dim() == 1, describe_tensors("aten::bucketize.Scalar", {boundaries}),
                    ": the boundaries must be 1-D, got ", boundaries.dim(), " dims");
  return sorted_search("aten::bucketize.Scalar", boundaries, wrapped_on(self, boundaries),
                       out_int32, right, std::nullopt, std::nullopt);
}

/// _unique2 / _unique: each rank's distinct values (of its local; a Partial reduced first),
/// gathered over the mesh dims that shard self (all_gather_v of the distinct values, never the
/// tensor) and made distinct again: the global sorted values, Replicate. The inverse keeps
/// self's layout (each element's position in the global values by searchsorted, no bytes); the
/// counts are each rank's bincount of its inverse, Partial(sum) over the sharding mesh dims.
/// sorted=false gives them sorted too (ATen allows either order). NaN refused (ATen keeps each
/// NaN as a value of its own).
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_impl(const std::string& name,
                                                           const at::Tensor& self,
                                                           bool return_inverse, bool return_counts) {
  const DTensor d = dtensor_of(self);
  const Layout src = partials_replicated(d.layout());
  const bool boolean = self.scalar_type() == at::kBool;  // searched and gathered as uint8
  at::Tensor local = local_as(self, src, d);
  if (boolean) local = local.to(at::kByte);
  at::AutoDispatchBelowADInplaceOrView below;
  at::Tensor u = std::get<0>(at::_unique2(local, /*sorted=*/true));
  for (size_t m = 0; m < src.placements().size(); ++m) {
    const Placement& q = src.placements()[m];
    if (!q.is_shard() && !q.is_ragged_shard()) continue;  // Replicate: the same values
    const at::Tensor all =
        comm::all_gather_v(u.contiguous(), d.device_mesh().get_group(static_cast<int64_t>(m)));
    u = std::get<0>(at::_unique2(all, /*sorted=*/true));
  }
  HYPER_CHECK_IMPLEMENTED(!at::isFloatingType(u.scalar_type()) || !u.isnan().any().item<bool>(),
                          describe_tensors(name, {self}), ": unique of values with NaN (ATen keeps "
                          "each NaN as a value of its own) is not implemented for DTensors");
  const int64_t n = u.size(0);
  const Placements rep(src.placements().size(), Replicate());
  const at::Tensor values = wrap(boolean ? u.to(at::kBool) : u, d, Layout(src.mesh(), rep, {n}));
  const at::Tensor inv = at::searchsorted(u, local);
  const at::Tensor inverse = return_inverse ? wrap(inv, d, src)
                                            : wrap(at::empty({0}, inv.options()), d, Layout(src.mesh(), rep, {0}));
  const at::Tensor counts = return_counts ? wrap(at::bincount(inv.reshape({-1}), {}, n), d,
                                                 counts_layout(src, {n}))
                                          : wrap(at::empty({0}, inv.options()), d, Layout(src.mesh(), rep, {0}));
  return {values, inverse, counts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool /*sorted*/,
                                                       bool return_inverse, bool return_counts) {
  return unique_impl("aten::_unique2", self, return_inverse, return_counts);
}
std::tuple<at::Tensor, at::Tensor> unique1(const at::Tensor& self, bool /*sorted*/,
                                           bool return_inverse) {
  auto [values, inverse, counts] = unique_impl("aten::_unique", self, return_inverse, false);
  return {values, inverse};
}

at::Tensor clamp_tensor(const at::Tensor& self, const std::optional<at::Tensor>& min,
                        const std::optional<at::Tensor>& max) {
  const bool lo = min && min->defined(), hi = max && max->defined();
  HYPER_CHECK_VALUE(lo || hi, describe_tensors("aten::clamp.Tensor", {self}),
                    ": at least one of 'min' or 'max' must not be None");
  at::Tensor x = lo ? at::clamp_min(self, *min) : self;
  return hi ? at::clamp_max(x, *max) : x;
}
at::Tensor& clamp_tensor_(at::Tensor& self, const std::optional<at::Tensor>& min,
                          const std::optional<at::Tensor>& max) {
  const bool lo = min && min->defined(), hi = max && max->defined();
  HYPER_CHECK_VALUE(lo || hi, describe_tensors("aten::clamp_.Tensor", {self}),
                    ": at least one of 'min' or 'max' must not be None");
  if (lo) self.clamp_min_(*min);
  if (hi) self.clamp_max_(*max);
  return self;
}

// ---- the *_copy forms of views: the view, copied -----------------------------------------

at::Tensor copied(const at::Tensor& v) { return v.clone(at::MemoryFormat::Contiguous); }
at::Tensor alias_copy(const at::Tensor& self) { return copied(self); }
at::Tensor permute_copy(const at::Tensor& self, at::IntArrayRef dims) { return copied(self.permute(dims)); }
at::Tensor view_copy(const at::Tensor& self, c10::SymIntArrayRef size) { return copied(self.view_symint(size)); }
at::Tensor squeeze_copy(const at::Tensor& self) { return copied(self.squeeze()); }
at::Tensor squeeze_copy_dim(const at::Tensor& self, int64_t dim) { return copied(self.squeeze(dim)); }
at::Tensor squeeze_copy_dims(const at::Tensor& self, at::IntArrayRef dims) { return copied(self.squeeze(dims)); }
at::Tensor t_copy(const at::Tensor& self) { return copied(self.t()); }
at::Tensor transpose_copy(const at::Tensor& self, int64_t d0, int64_t d1) { return copied(self.transpose(d0, d1)); }
at::Tensor unsqueeze_copy(const at::Tensor& self, int64_t dim) { return copied(self.unsqueeze(dim)); }
at::Tensor narrow_copy(const at::Tensor& self, int64_t dim, c10::SymInt start, c10::SymInt length) {
  return copied(self.narrow_symint(dim, std::move(start), std::move(length)));
}
at::Tensor expand_copy(const at::Tensor& self, c10::SymIntArrayRef size, bool implicit) {
  return copied(self.expand_symint(size, implicit));
}
std::vector<at::Tensor> split_with_sizes_copy(const at::Tensor& self, c10::SymIntArrayRef sizes,
                                              int64_t dim) {
  std::vector<at::Tensor> parts = self.split_with_sizes_symint(sizes, dim);
  for (at::Tensor& p : parts) p = copied(p);
  return parts;
}
std::vector<at::Tensor> unbind_copy(const at::Tensor& self, int64_t dim) {
  std::vector<at::Tensor> parts = self.unbind(dim);
  for (at::Tensor& p : parts) p = copied(p);
  return parts;
}

/// _conj (the lazy conjugate view): materialized as _conj_physical, so a DTensor never carries
/// a conjugate bit its wrapper would not show (values as ATen's; autograd records
/// _conj_physical, whose gradient is the conjugate).
at::Tensor conj_view(const at::Tensor& self) { return at::_conj_physical(self); }

/// rot90(self, k, dims): ATen's composition, flips and a transpose (a Shard of a flipped dim
/// is gathered by flip's rule, dim_local_kernels.h; every other Shard kept).
at::Tensor rot90(const at::Tensor& self, int64_t k, at::IntArrayRef dims) {
  const std::string w = describe_tensors("aten::rot90", {self});
  HYPER_CHECK_VALUE(dims.size() == 2, w, ": expected total rotation dims == 2, but got dims = ",
                    dims.size());
  HYPER_CHECK_VALUE(self.dim() >= 2, w, ": expected total dims >= 2, but got total dims = ",
                    self.dim());
  const int64_t d0 = c10::maybe_wrap_dim(dims[0], self.dim()), d1 = c10::maybe_wrap_dim(dims[1], self.dim());
  HYPER_CHECK_VALUE(d0 != d1, w, ": expected rotation dims to be different, but got dim0 = ",
                    dims[0], " and dim1 = ", dims[1]);
  switch (((k % 4) + 4) % 4) {
    case 1: return self.flip({d1}).transpose(d0, d1);
    case 2: return self.flip({d0, d1});
    case 3: return self.flip({d0}).transpose(d0, d1);
    default: return copied(self);
  }
}

/// beta * self + alpha * product, as ATen's addmv / addr / addbmm: beta 0 ignores self's
/// values (NaN and inf included), broadcast to the product's shape.
at::Tensor scaled_sum(const at::Tensor& self, at::Tensor product, const at::Scalar& beta,
                      const at::Scalar& alpha) {
  if (!alpha.equal(1)) product = product * alpha;
  // self filled with 0 everywhere: its values ignored, its gradient zeros (ATen's grad * beta).
  if (beta.equal(0)) return product + self.masked_fill(at::ones_like(self, at::kBool), 0);
  return at::add(product, self, beta);
}
at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  return scaled_sum(self, at::mv(mat, vec), beta, alpha);
}
at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                const at::Scalar& beta, const at::Scalar& alpha) {
  HYPER_CHECK_VALUE(vec1.dim() == 1 && vec2.dim() == 1,
                    describe_tensors("aten::addr", {self, vec1, vec2}),
                    ": addr: Expected 1-D argument vec1 and vec2, but got ", vec1.dim(), "-D and ",
                    vec2.dim(), "-D");
  return scaled_sum(self, vec1.unsqueeze(1) * vec2.unsqueeze(0), beta, alpha);
}
at::Tensor addbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                  const at::Scalar& beta, const at::Scalar& alpha) {
  return scaled_sum(self, at::bmm(b1, b2).sum(0), beta, alpha);
}

}  // namespace

const KernelFamily& decomposition_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"decomposition", /*serves_out=*/true, {
      HYPER_KERNEL("aten::norm.ScalarOpt_dim", K::kBoth, norm_opt_dim),
      HYPER_KERNEL("aten::norm.ScalarOpt_dtype", K::kBoth, norm_opt_dtype),
      HYPER_KERNEL("aten::norm.ScalarOpt_dim_dtype", K::kBoth, norm_opt_dim_dtype),
      HYPER_KERNEL("aten::dist", K::kBoth, dist),
      HYPER_KERNEL("aten::var_mean.correction", K::kBoth, var_mean),
      HYPER_KERNEL("aten::std_mean.correction", K::kBoth, std_mean),
      HYPER_KERNEL("aten::aminmax", K::kBoth, aminmax),
      HYPER_KERNEL("aten::count_nonzero", K::kBoth, count_nonzero),
      HYPER_KERNEL("aten::count_nonzero.dim_IntList", K::kBoth, count_nonzero_dims),
      HYPER_KERNEL("aten::nansum", K::kBoth, nansum),
      HYPER_KERNEL("aten::equal", K::kBoth, equal),
      HYPER_KERNEL("aten::allclose", K::kBoth, allclose),
      HYPER_KERNEL("aten::mv", K::kBoth, mv),
      HYPER_KERNEL("aten::repeat", K::kBoth, repeat),
      HYPER_KERNEL("aten::constant_pad_nd", K::kBoth, constant_pad_nd),
      HYPER_KERNEL("aten::glu", K::kBoth, glu),
      HYPER_KERNEL("aten::median", K::kBoth, median_all),
      HYPER_KERNEL("aten::nanmedian", K::kBoth, nanmedian_all),
      HYPER_KERNEL("aten::masked_select", K::kBoth, masked_select),
      HYPER_KERNEL("aten::clamp.Tensor", K::kBoth, clamp_tensor),
      HYPER_KERNEL("aten::clamp_.Tensor", K::kBoth, clamp_tensor_),
      HYPER_KERNEL("aten::trace", K::kBoth, trace),
      HYPER_KERNEL("aten::cdist", K::kBoth, cdist),
      HYPER_KERNEL("aten::embedding_bag", K::kBoth, embedding_bag),
      HYPER_KERNEL("aten::embedding_bag.padding_idx", K::kBoth, embedding_bag_padding),
      HYPER_KERNEL("aten::alias_copy", K::kBoth, alias_copy),
      HYPER_KERNEL("aten::permute_copy", K::kBoth, permute_copy),
      HYPER_KERNEL("aten::view_copy", K::kBoth, view_copy),
      HYPER_KERNEL("aten::squeeze_copy", K::kBoth, squeeze_copy),
      HYPER_KERNEL("aten::squeeze_copy.dim", K::kBoth, squeeze_copy_dim),
      HYPER_KERNEL("aten::squeeze_copy.dims", K::kBoth, squeeze_copy_dims),
      HYPER_KERNEL("aten::t_copy", K::kBoth, t_copy),
      HYPER_KERNEL("aten::transpose_copy.int", K::kBoth, transpose_copy),
      HYPER_KERNEL("aten::unsqueeze_copy", K::kBoth, unsqueeze_copy),
      HYPER_KERNEL("aten::narrow_copy", K::kBoth, narrow_copy),
      HYPER_KERNEL("aten::expand_copy", K::kBoth, expand_copy),
      HYPER_KERNEL("aten::split_with_sizes_copy", K::kBoth, split_with_sizes_copy),
      HYPER_KERNEL("aten::unbind_copy.int", K::kBoth, unbind_copy),
      HYPER_KERNEL("aten::rot90", K::kBoth, rot90),
      HYPER_KERNEL("aten::_conj", K::kBoth, conj_view),
      HYPER_KERNEL("aten::addmv", K::kBoth, addmv),
      HYPER_KERNEL("aten::addr", K::kBoth, addr),
      HYPER_KERNEL("aten::addbmm", K::kBoth, addbmm),
      // Not differentiable: below autograd only.
      HYPER_KERNEL("aten::nonzero", K::kDTensor, nonzero),
      HYPER_KERNEL("aten::histc", K::kDTensor, histc),
      HYPER_KERNEL("aten::bincount", K::kDTensor, bincount),
      HYPER_KERNEL("aten::searchsorted.Tensor", K::kDTensor, searchsorted),
      HYPER_KERNEL("aten::searchsorted.Scalar", K::kDTensor, searchsorted_scalar),
      HYPER_KERNEL("aten::bucketize.Tensor", K::kDTensor, bucketize),
      HYPER_KERNEL("aten::bucketize.Scalar", K::kDTensor, bucketize_scalar),
      HYPER_KERNEL("aten::_unique2", K::kDTensor, unique2),
      HYPER_KERNEL("aten::_unique", K::kDTensor, unique1),
  }};
  return f;
}

}  // namespace hyper::dispatch
