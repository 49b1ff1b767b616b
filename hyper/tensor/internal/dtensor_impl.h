#pragma once
/// \file internal/dtensor_impl.h
/// hyper::DTensorImpl: the TensorImpl behind hyper::as_tensor (dtensor_tensor.h). Internal to
/// the dispatch code; users go through as_tensor / as_dtensor.

#include <c10/core/TensorImpl.h>

#include "hyper/tensor/dtensor.h"

namespace hyper::dispatch {

/// A storage-less TensorImpl holding a DTensor. Sizes are the global shape, strides
/// contiguous, dtype and device the local tensor's; keys: PrivateUse3 (+ its autograd key
/// and ADInplaceOrView, added by TensorImpl). Storage access throws ("Cannot access
/// storage of hyper::DTensorImpl").
class DTensorImpl : public c10::TensorImpl {
 public:
  explicit DTensorImpl(DTensor dt);

  const DTensor& dtensor() const { return dt_; }

  /// For a view whose local tensor is a copy (it redistributed or copied its input's local):
  /// the version of the base's version counter (shared with the view) when the copy was made;
  /// -1 otherwise. A later write to the base bumps the counter: the copy is stale, and the
  /// fallback refuses to read it.
  int64_t copied_at_version() const { return copied_at_version_; }
  void set_copied_at_version(int64_t v) { copied_at_version_ = v; }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  const char* tensorimpl_type_name() const override;
  DTensor dt_;
  int64_t copied_at_version_ = -1;
};

/// Registers the fallback and the per-op kernels for PrivateUse3 once (thread-safe).
void register_dtensor_kernels();

}  // namespace hyper::dispatch
