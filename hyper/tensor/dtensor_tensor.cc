// hyper::DTensorImpl and the as_tensor / is_dtensor / as_dtensor API (dtensor_tensor.h).
#include "hyper/tensor/dtensor_tensor.h"

#include <c10/core/DispatchKeySet.h>

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

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(dt_);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  impl->copied_at_version_ = copied_at_version_;
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(dt_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter),
                       allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  impl->copied_at_version_ = copied_at_version_;
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
