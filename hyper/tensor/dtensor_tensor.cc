// hyper::DTensorImpl and the as_tensor / is_dtensor / as_dtensor API (dtensor_tensor.h).
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/copied_view.h"

#include <ATen/ATen.h>
#include <c10/core/DispatchKeySet.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "hyper/core/errors.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/redistribute.h"

namespace hyper {
namespace dispatch {

DTensorImpl::DTensorImpl(DTensor dt)
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse3),
                      dt.options().dtype(), dt.options().device()),
      dt_(std::move(dt)) {
  // No storage: its data are the ranks' local shards. An ATen composite without a rule that
  // reads a data pointer (max_pool1d without grad, quantile) fails with this message instead of
  // c10's "doesn't have storage" (each wrapper's ExtraMeta holds a copy: two short strings).
  static const std::string kNoStorage =
      "hyper DTensor (hyper::DTensorImpl): an ATen kernel read the data pointer (or storage) of a "
      "DTensor tensor, which has none (its data are the ranks' shards): a composite op without a "
      "sharding rule, refused; use as_dtensor(t).full_tensor() or to_local()";
  release_storage_and_set_meta_custom_data_ptr_error_msg_(kNoStorage);
  set_sizes_contiguous(dt_.shape());
}

void CopiedView::write_back(std::optional<int64_t> current_version) {
  {
    at::AutoDispatchBelowADInplaceOrView below;  // plain locals
    const int64_t len = target.size(dim);
    if (select) {
      if (start >= lo && start < lo + len) target.select(dim, start - lo).copy_(source);
    } else {
      // The slice's elements i = 0..n-1 are the global rows start + i * step; this rank's
      // target holds rows [lo, lo + len).
      const int64_t n = source.size(dim);
      // (i0 and i1 as ceil((lo - start) / step), ceil((lo + len - start) / step), written so
      // that a step near INT64_MAX cannot overflow.)
      const int64_t i0 = lo > start ? (lo - start - 1) / step + 1 : 0;
      const int64_t i1 = std::min(n, lo + len > start ? (lo + len - start - 1) / step + 1 : 0);
      if (i0 < i1)
        target.slice(dim, start + i0 * step - lo, start + (i1 - 1) * step - lo + 1, step)
            .copy_(source.slice(dim, i0, i1));
    }
  }
  bump_local_version(target);  // written below ADInplaceOrView
  if (parent) parent->write_back(current_version);
  if (current_version) {
    version = *current_version;
    pending_bumps = 1;
  }
}

std::optional<SliceOf> slice_of(const std::string& name, const at::Tensor& self,
                                const c10::IValue* args) {
  const bool select = name == "aten::select.int";
  if (!select && name != "aten::slice.Tensor") return std::nullopt;
  const int64_t nd = self.dim();
  if (nd == 0 || !args[1].isInt()) return std::nullopt;
  int64_t dim = args[1].toInt();
  if (dim < -nd || dim >= nd) return std::nullopt;
  if (dim < 0) dim += nd;
  const int64_t size = self.size(dim);
  SliceOf s;
  s.dim = dim;
  s.select = select;
  if (select) {
    if (!args[2].isInt()) return std::nullopt;
    s.start = args[2].toInt();
    if (s.start < 0) s.start += size;
    if (s.start < 0 || s.start >= size) return std::nullopt;
    return s;
  }
  if (!args[2].isNone() && !args[2].isInt()) return std::nullopt;
  if (!args[4].isInt() || args[4].toInt() < 1) return std::nullopt;
  int64_t start = args[2].isNone() ? 0 : args[2].toInt();
  if (start < 0) start += size;
  s.start = std::min(std::max<int64_t>(start, 0), size);
  s.step = args[4].toInt();
  return s;
}

void track_copied_view(const at::Tensor& in, const at::Tensor& out, const at::Tensor& out_local,
                       const std::optional<SliceOf>& slice) {
  if (!is_dtensor(in) || !is_dtensor(out)) return;
  const auto* in_impl = static_cast<const DTensorImpl*>(in.unsafeGetTensorImpl());
  auto* out_impl = static_cast<DTensorImpl*>(out.unsafeGetTensorImpl());
  const at::Tensor in_local = in_impl->dtensor().to_local();
  if (out_local.is_alias_of(in_local)) {
    out_impl->set_copied(in_impl->copied());
    out_impl->set_own_counter(in_impl->own_counter());  // a view of `t.data()` refuses writes too
    return;
  }
  auto c = std::make_shared<CopiedView>();
  if (!in.is_inference()) {  // (inference: no counter, never stale)
    c->counter = in.unsafeGetTensorImpl()->version_counter();
    c->version = in._version();
  }
  c->parent = in_impl->copied();
  const Layout& li = in_impl->dtensor().layout();
  const Layout& lo = out_impl->dtensor().layout();
  bool writable = slice.has_value() && !li.is_ragged() && !lo.is_ragged() &&
                  li.placements().size() == lo.placements().size();
  bool cut = false;  // some mesh dim sharded the dim
  for (size_t m = 0; writable && m < li.placements().size(); ++m) {
    const Placement& p = li.placements()[m];
    const Placement& q = lo.placements()[m];
    if (p.is_shard(slice->dim)) {
      writable = q.is_replicate();
      cut = true;
    } else if (p.is_shard()) {
      const int64_t k = p.dim();
      writable = q.is_shard(slice->select && k > slice->dim ? k - 1 : k);
    } else {
      writable = q == p;
    }
  }
  if (writable && cut) {
    c->writable = true;
    c->source = out_local;
    c->target = in_local;
    c->dim = slice->dim;
    c->start = slice->start;
    c->step = slice->step;
    c->select = slice->select;
    c->lo = li.local_box(in_impl->dtensor().mesh_index()).offsets[slice->dim];
  }
  out_impl->set_copied(std::move(c));
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(dt_);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  impl->copied_ = copied_;
  impl->own_counter_ = own_counter_;
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(dt_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter),
                       allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  // A new version counter: `t.data()` (variable_data), or make_variable (a saved variable
  // unpacked, which then gets the saved counter back). The record is shared (reads are checked
  // against it with whatever counter the tensor ends up with), but in-place ops through this
  // wrapper are refused: with a counter that does not move with the base's writes, a write
  // could not be tracked (before: `v.data().mul_(2)` would change the copy alone).
  impl->copied_ = copied_;
  impl->own_counter_ = copied_ != nullptr;
  return impl;
}

void DTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>&) {
  throw NotImplementedError(
      "hyper::DTensorImpl: set_data / shallow_copy_from on a DTensor tensor is not implemented");
}

bool DTensorImpl::memoisable(const Layout& target, const at::Tensor& local) const {
  // (Inference tensors have no version counter: TensorImpl::is_inference() is not const.)
  // Remembered: a relayout that communicates (a Partial reduced, a Shard gathered or moved),
  // not a local cut of a Replicate (R -> S / P: cheap, and it would evict a gather); a
  // RaggedShard's gathers are not (as before this was extended).
  const Layout& from = dt_.layout();
  bool moves = from.has_partial();
  for (size_t m = 0; m < from.placements().size() && !moves && !from.is_ragged(); ++m)
    moves = from.placements()[m].is_shard() && !(target.placements()[m] == from.placements()[m]);
  return moves && version_counter().enabled() && !local.is_inference();
}

at::Tensor DTensorImpl::find_memo(const Layout& target, const at::Tensor& local) const {
  std::lock_guard<std::mutex> g(memo_mu_);
  if (memo_ && memo_->version == version_counter().current_version() &&
      memo_->local_version == local._version() && memo_->target == target)
    return memo_->local;
  return at::Tensor();
}

void DTensorImpl::store_memo(const Layout& target, const at::Tensor& local,
                             const at::Tensor& relaid) const {
  auto m = std::make_shared<const Reduced>(Reduced{target, version_counter().current_version(),
                                                   static_cast<uint32_t>(local._version()), relaid});
  std::lock_guard<std::mutex> g(memo_mu_);
  memo_ = std::move(m);
}

at::Tensor DTensorImpl::remembered(const Layout& target) const {
  const at::Tensor local = dt_.to_local();
  return memoisable(target, local) ? find_memo(target, local) : at::Tensor();
}

bool DTensorImpl::remember(const Layout& target, const at::Tensor& relaid) const {
  const at::Tensor local = dt_.to_local();
  if (!memoisable(target, local)) return false;
  store_memo(target, local, relaid);
  return true;
}

at::Tensor DTensorImpl::local_as(const Layout& target, bool memo) const {
  const at::Tensor local = dt_.to_local();
  const Layout& from = dt_.layout();
  if (target == from) return local;
  memo = memo && memoisable(target, local);
  if (memo) {
    at::Tensor r = find_memo(target, local);
    if (r.defined()) return r;
  }
  at::Tensor r = redistribute_local(local, dt_.device_mesh(), from, target);
  if (memo) store_memo(target, local, r);
  return r;
}

const char* DTensorImpl::tensorimpl_type_name() const { return "hyper::DTensorImpl"; }

}  // namespace dispatch

c10::DispatchKey dtensor_dispatch_key() { return c10::DispatchKey::PrivateUse3; }

at::Tensor as_tensor(const DTensor& dt) {
  HYPER_CHECK_VALUE(dt.defined(), "hyper::as_tensor: the DTensor is undefined");
  dispatch::register_dtensor_kernels();
  return at::Tensor(c10::make_intrusive<dispatch::DTensorImpl>(dt));
}

at::Tensor DTensor::as_tensor() const { return hyper::as_tensor(*this); }
DTensor DTensor::from_tensor(const at::Tensor& t) { return hyper::as_dtensor(t); }

bool is_dtensor(const at::Tensor& t) {
  return t.defined() && t.key_set().has(c10::DispatchKey::PrivateUse3) &&
         dynamic_cast<const dispatch::DTensorImpl*>(t.unsafeGetTensorImpl()) != nullptr;
}

bool is_copied_view(const at::Tensor& t) {
  return is_dtensor(t) &&
         static_cast<const dispatch::DTensorImpl*>(t.unsafeGetTensorImpl())->copied() != nullptr;
}

DTensor as_dtensor(const at::Tensor& t) {
  HYPER_CHECK_VALUE(t.defined(), "hyper::as_dtensor: got an undefined tensor, expected a "
                    "DTensor tensor (made by hyper::as_tensor)");
  if (!is_dtensor(t)) {
    std::ostringstream os;
    os << "hyper::as_dtensor: got a plain tensor (" << t.unsafeGetTensorImpl()->device_type()
       << ", " << t.scalar_type() << ", sizes " << t.sizes()
       << "), expected a DTensor tensor (made by hyper::as_tensor)";
    throw ValueError(os.str());
  }
  return static_cast<const dispatch::DTensorImpl*>(t.unsafeGetTensorImpl())->dtensor();
}

}  // namespace hyper
