#pragma once
/// \file internal/dtensor_impl.h
/// hyper::DTensorImpl: the TensorImpl behind hyper::as_tensor (dtensor_tensor.h). Internal to
/// the dispatch code; users go through as_tensor / as_dtensor.

#include <c10/core/TensorImpl.h>

#include <memory>
#include <mutex>

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

  /// The local tensor laid out as `target` (redistribute_local; the local itself when the
  /// layouts are equal). When the relayout communicates (a Partial reduced, a Shard gathered
  /// or moved; not a RaggedShard, not a local cut of a Replicate) and `memo` is set, the
  /// relaid-out local is remembered and returned again, without communication, to the next
  /// read of the same layout, so a Partial activation read by several ops (a residual stream
  /// read by layer_norm forward and backward, pow forward and backward) is reduced once, and a
  /// sequence-sharded activation read by q, k and v (linear_kernel.h) is gathered once, not
  /// once per read. The memo holds one layout; it is dropped when the tensor is written: its key
  /// is this wrapper's version counter and the local tensor's (the same on every rank in an
  /// SPMD program, so every rank hits or misses together and no collective is left unmatched).
  /// Never for inference tensors (no version counter). The caller must not write the result
  /// (the fallback passes memo = false for in-place and view ops).
  at::Tensor local_as(const Layout& target, bool memo) const;
  /// The local remembered for `target` (as local_as(target, true) would return it without
  /// communication); undefined when none is.
  at::Tensor remembered(const Layout& target) const;
  /// Remembers `local` as this tensor laid out as `target`, for a relayout made elsewhere (the
  /// collective linear, linear_kernel.h), under local_as's rules (only a relayout that
  /// communicates; not for inference tensors). Returns whether it was remembered.
  bool remember(const Layout& target, const at::Tensor& local) const;

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  /// Whether a relayout of this tensor (local `local`) to `target` may be remembered.
  bool memoisable(const Layout& target, const at::Tensor& local) const;
  /// The memo for `target` of this tensor's local `local`, if it is current; undefined else.
  at::Tensor find_memo(const Layout& target, const at::Tensor& local) const;
  /// Remembers `relaid` as `local` laid out as `target` (the caller checked memoisable).
  void store_memo(const Layout& target, const at::Tensor& local, const at::Tensor& relaid) const;
  const char* tensorimpl_type_name() const override;
  DTensor dt_;
  int64_t copied_at_version_ = -1;
  struct Reduced {
    Layout target;
    uint32_t version, local_version;
    at::Tensor local;
  };
  mutable std::mutex memo_mu_;
  mutable std::shared_ptr<const Reduced> memo_;  // not copied by shallow_copy_and_detach
};

/// Registers the fallback and the per-op kernels for PrivateUse3 once (thread-safe).
void register_dtensor_kernels();

}  // namespace hyper::dispatch
