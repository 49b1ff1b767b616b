// hyper::DTensorImpl and the as_tensor / is_dtensor / as_dtensor API (dtensor_tensor.h).
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/copied_view.h"

#include <atomic>
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DispatchKeySet.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <typeinfo>

#include "hyper/core/errors.h"
#include "hyper/tensor/internal/autograd.h"
#include "hyper/tensor/internal/dtensor_access.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/redistribute.h"

namespace hyper {
namespace dispatch {

DTensorImpl::DTensorImpl(DTensor dt)
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse3),
                      DTensorAccess::raw_local(dt).dtype(), DTensorAccess::raw_local(dt).device()),
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
  local_current();
  if (family && local_counter.enabled()) {
    std::lock_guard<std::mutex> lock(family->mu);
    family->log.push_back(region());
    if (family->log.size() > WriteBacks::kMax) family->log.pop_front();
  }
  if (parent) parent->write_back(current_version);
  if (current_version) {
    version = *current_version;
    pending_bumps = 1;
  }
}

bool CopiedView::disjoint(const WriteBacks::Entry& e) const {
  const WriteBacks::Entry me = region();
  const int64_t n = me.count, s = me.step;
  if (n == 0 || e.count == 0) return true;
  if (e.dim != dim) return false;  // (rows of another dim cross these)
  const int64_t last = start + (n - 1) * s, e_last = e.first + (e.count - 1) * e.step;
  if (last < e.first || e_last < start) return true;
  // Interleaved slices of one step (x[:, ::2] and x[:, 1::2]); other overlaps count as one.
  return n > 1 && e.count > 1 && s == e.step && (start - e.first) % s != 0;
}

bool CopiedView::local_writes_explained(int64_t* k) const {
  *k = 0;
  if (!local_counter.enabled()) return true;
  const int64_t now = static_cast<int64_t>(local_counter.current_version());
  if (now == local_version) return true;
  if (!writable || !family || now < local_version) return false;
  std::lock_guard<std::mutex> lock(family->mu);
  for (const WriteBacks::Entry& e : family->log) {
    if (e.local_after <= local_version || e.local_after > now) continue;
    if (!disjoint(e)) return false;
    ++*k;
  }
  return *k == now - local_version;  // no write other than those
}

std::shared_ptr<WriteBacks> DTensorImpl::write_backs() const {
  std::lock_guard<std::mutex> lock(memo_mu_);
  if (!write_backs_) write_backs_ = std::make_shared<WriteBacks>();
  return write_backs_;
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
    share_local_counter(in_local, out_local);  // (dtensor_impl.h)
    out_impl->set_copied(in_impl->copied());
    return;
  }
  auto c = std::make_shared<CopiedView>();
  if (!in.is_inference()) {  // (inference: no counter, never stale)
    c->counter = in.unsafeGetTensorImpl()->version_counter();
    c->version = in._version();
  }
  if (!in_local.is_inference()) {
    c->local_counter = in_local.unsafeGetTensorImpl()->version_counter();
    c->local_current();
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
    c->family = in_impl->write_backs();
  }
  out_impl->set_copied(std::move(c));
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  // (The same copy; the counter handle copied shares the counter, as copy_tensor_metadata's.)
  return shallow_copy_and_detach(c10::VariableVersion(version_counter),
                                 allow_tensor_metadata_change);
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(dt_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter),
                       allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  // The counter given: x's own (detach()), or a new one (`t.data()`, variable_data; or
  // make_variable: a saved variable unpacked, which then gets the saved counter back). The
  // record is shared: reads are checked
  // against the base's counters it keeps, and an in-place op through this wrapper writes
  // through to the base as one through the view does; the write moves the base's local counter
  // (not the base's own, as ATen's `.data()` writes do not), which makes the sibling copies
  // stale (CopiedView::local_counter).
  impl->copied_ = copied_;
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    impl->write_backs_ = write_backs_;
  }
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
  // RaggedShard's gathers are not.
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
  if (at::GradMode::is_enabled() && DTensorAccess::raw_local(dt).requires_grad())
    return tensor_internal::wrap_with_history(dt);
  return dispatch::wrap_dtensor(dt);
}

at::Tensor DTensor::as_tensor() const { return hyper::as_tensor(*this); }
DTensor DTensor::from_tensor(const at::Tensor& t) { return hyper::as_dtensor(t); }

bool is_dtensor(const at::Tensor& t) {
  // DTensorImpl is final: its exact type identifies it (cheaper than a dynamic_cast).
  return t.defined() && t.key_set().has(c10::DispatchKey::PrivateUse3) &&
         typeid(*t.unsafeGetTensorImpl()) == typeid(dispatch::DTensorImpl);
}

bool is_copied_view(const at::Tensor& t) {
  return is_dtensor(t) &&
         static_cast<const dispatch::DTensorImpl*>(t.unsafeGetTensorImpl())->copied() != nullptr;
}

DTensor as_dtensor(const at::Tensor& t) {
  DTensor dt = dispatch::dtensor_of(t);
  if (at::GradMode::is_enabled() && t.requires_grad())
    return tensor_internal::unwrap_with_history(t, std::move(dt));
  return dt;
}

namespace dispatch {

DTensor dtensor_of(const at::Tensor& t) {
  HYPER_CHECK_VALUE(t.defined(), "hyper::as_dtensor: got an undefined tensor, expected a "
                    "DTensor tensor (made by hyper::as_tensor)");
  if (!is_dtensor(t)) {
    std::ostringstream os;
    os << "hyper::as_dtensor: got a plain tensor (" << t.unsafeGetTensorImpl()->device_type()
       << ", " << t.scalar_type() << ", sizes " << t.sizes()
       << "), expected a DTensor tensor (made by hyper::as_tensor)";
    throw ValueError(os.str());
  }
  return static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl())->dtensor();
}

at::Tensor wrap_dtensor(DTensor dt) {
  const at::Tensor& local = DTensorAccess::raw_local(dt);
  HYPER_CHECK_INTERNAL(local.defined(), "hyper::as_tensor: an undefined DTensor");
  HYPER_CHECK_INTERNAL(!local.key_set().has(c10::DispatchKey::PrivateUse3),
                       "hyper::as_tensor: a DTensor whose local tensor is a DTensor tensor");
  register_dtensor_kernels();
  return at::Tensor(c10::make_intrusive<DTensorImpl>(std::move(dt)));
}

}  // namespace dispatch

namespace {
std::atomic<KernelErrorHook> g_kernel_error_hook{nullptr};
}  // namespace

void set_kernel_error_hook(KernelErrorHook hook) { g_kernel_error_hook.store(hook); }

namespace dispatch {
KernelErrorHook kernel_error_hook() { return g_kernel_error_hook.load(std::memory_order_relaxed); }
}  // namespace dispatch

}  // namespace hyper
