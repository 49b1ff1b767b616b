#pragma once
/// \file internal/dtensor_impl.h
/// hyper::DTensorImpl: the TensorImpl behind hyper::as_tensor (dtensor_tensor.h). Internal to
/// the dispatch code; users go through as_tensor / as_dtensor.

#include <c10/core/TensorImpl.h>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "hyper/tensor/dtensor.h"

namespace hyper::dispatch {

/// After a write to `local` below ADInplaceOrView (which would have bumped its version):
/// bumps the local's version counter, so a relayout any wrapper of this local remembered
/// (DTensorImpl::local_as) is forgotten, also when the write came through another wrapper
/// with its own version counter (p.data(), as LibTorch's optimizers write parameters).
inline void bump_local_version(const at::Tensor& local) {
  c10::VariableVersion vc = local.unsafeGetTensorImpl()->version_counter();
  if (vc.enabled()) vc.bump();
}

/// Makes `out_local`, a view of `in_local` made below ADInplaceOrView (so with a counter of its
/// own), share `in_local`'s version counter, as ATen's views share their base's: a write through
/// it (a view of `x.data()`, an expand, an unsafe_split piece: wrappers whose counter is not
/// x's) then moves the counter that x's copies (CopiedView::local_counter) and x's memo watch.
/// Nothing for a local that is not a view of it, is it, or is an inference tensor.
inline void share_local_counter(const at::Tensor& in_local, const at::Tensor& out_local) {
  c10::TensorImpl* o = out_local.unsafeGetTensorImpl();
  if (o != in_local.unsafeGetTensorImpl() && !out_local.is_inference() &&
      !in_local.is_inference() && out_local.is_alias_of(in_local))
    o->set_version_counter(in_local.unsafeGetTensorImpl()->version_counter());
}

/// The write-backs of writable copies into one input's local (shared by the copies taken from
/// one wrapper: CopiedView::family), each with the local's version after it, so a copy can
/// tell a sibling's write-back into rows it does not hold (it stays current, as a disjoint
/// view of a plain tensor is unchanged by it) from any other write of the local (stale). The
/// last kMax only; an older one is no longer explained (stale: refused, never wrong).
struct WriteBacks {
  struct Entry {
    int64_t local_after;  // the local's version after this write-back
    int64_t dim, first, step, count;  // the input's indices it wrote: first + i * step, i < count
  };
  static constexpr size_t kMax = 1024;
  std::mutex mu;
  std::deque<Entry> log;
};

/// A view of a DTensor whose local tensor is a copy of (part of) its input's local (the view
/// redistributed its input: a slice of a sharded dim gathers it; or it copied a non-row-major
/// local). `version`: the base's version counter (which every view of it shares) when the copy
/// last equalled the base; a later write to the base moves the counter and the copy is stale:
/// reading it is refused (dispatch_args.h check_no_stale_copy), as is reading a copy of a stale
/// copy (`parent`: the input's CopiedView when the input's local is itself such a copy).
///
/// A copy made by slicing or selecting a dim that some mesh dim shards (slice.Tensor,
/// select.int, the pieces of split / unbind) is *writable*: after an in-place op writes it,
/// write_back() copies each rank's part of it into the input's local (the rank's own rows of
/// the slice: no communication, since the view holds the whole slice on every rank of those
/// mesh dims), then the parent's, so the write reaches the base as a plain view's would. Other
/// copies (a view merging a sharded inner dim, a transposed local made contiguous) refuse
/// in-place ops.
struct CopiedView {
  int64_t version = 0;
  /// The base's version counter (shared by every autograd view of it), so staleness is judged
  /// on it even through a wrapper with its own counter (`t.data()`); disabled for inference.
  c10::VariableVersion counter{c10::VariableVersion::DISABLED};
  /// The input's local tensor's version counter and its value when the copy last equalled it.
  /// Every write of a local moves it (hyper's kernels write locals below ADInplaceOrView and
  /// bump it: bump_local_version; a plain op on `to_local()` bumps it itself), whichever wrapper
  /// the write came through: `x.data()` has a counter of its own, so a write through it leaves
  /// `counter` where it was and only this one says the copy missed it. Disabled for inference.
  c10::VariableVersion local_counter{c10::VariableVersion::DISABLED};
  int64_t local_version = 0;
  std::shared_ptr<CopiedView> parent;
  bool writable = false;
  at::Tensor source;  // the view's local (the copy); writable only
  at::Tensor target;  // the input's local
  int64_t dim = 0;    // the sliced / selected dim of the input
  int64_t start = 0;  // slice: the first global index; select: the index
  int64_t step = 1;
  bool select = false;
  int64_t lo = 0;     // the global index of the target's first row along dim
  std::shared_ptr<WriteBacks> family;  // writable only: the write-backs into `target`

  /// After a write-back inside an in-place op, the op's ADInplaceOrView kernel bumps the
  /// base's counter when it returns: once per written argument that shares it (an out= op with
  /// two outs that are views of one base bumps it twice), so version + pending_bumps is current
  /// too (the next write moves it past). Two writes inside one op (clamp_ as clamp_min_ then
  /// clamp_max_) both see `version`.
  int64_t pending_bumps = 0;

  /// True when this copy or a copy it was taken from missed a write to the base (never for
  /// inference tensors: no counter). A sibling copy's write-back into indices this copy does
  /// not hold (`family`) is not one; it also moves the base's counter at most once (its op's
  /// bump), so up to one bump per such write-back is expected.
  bool stale() const {
    if (!counter.enabled()) return false;
    // The counter is the base's, shared by the chain: the write-backs explained at every level
    // (a sibling of the parent writing the base's other rows) may each have moved it.
    int64_t k_chain = 0;
    for (const CopiedView* c = this; c != nullptr; c = c->parent.get()) {
      int64_t k = 0;
      if (!c->local_writes_explained(&k)) return true;
      k_chain += k;
    }
    const int64_t d = static_cast<int64_t>(counter.current_version()) - version;
    const bool current = d == 0 || (pending_bumps > 0 && d == pending_bumps) ||
                         (k_chain > 0 && d >= 0 && d <= pending_bumps + k_chain);
    return !current || (parent && parent->stale());
  }
  /// Whether every write of the input's local since the copy last equalled it is a sibling's
  /// write-back into rows this copy does not hold (`*k`: how many).
  bool local_writes_explained(int64_t* k) const;
  /// Whether the input's indices this copy holds along `dim` and those of `e` are disjoint.
  bool disjoint(const WriteBacks::Entry& e) const;
  /// The input's indices this copy holds (a writable copy), as a log entry.
  WriteBacks::Entry region() const {
    return {local_version, dim, start, select ? 1 : step, select ? 1 : source.size(dim)};
  }
  /// The copy equals the input's local as it is now (after this copy's own write-back).
  void local_current() {
    if (local_counter.enabled()) local_version = static_cast<int64_t>(local_counter.current_version());
  }
  /// True when a write to the copy can reach the base (this copy and every parent writable).
  bool reaches_base() const { return writable && (!parent || parent->reaches_base()); }
  /// Copies this rank's part of `source` into `target` (and on up the parents); every copy of
  /// the chain is then current as of `current_version` (the base's counter now, its bump by the
  /// in-place op pending); nullopt for an inference tensor (no counter). Requires reaches_base().
  void write_back(std::optional<int64_t> current_version);
  /// After write_back() inside an op that bumps the base's counter `bumps` times when it
  /// returns (an out= op whose outs include `bumps` views of the base): this copy and its
  /// parents are current after them.
  /// (The other outs' write-backs, which moved the shared local's counter too, are in the log.)
  void expect_bumps(int64_t bumps) {
    for (CopiedView* c = this; c != nullptr; c = c->parent.get()) c->pending_bumps = bumps;
  }
};

/// A storage-less TensorImpl holding a DTensor. Sizes are the global shape, strides
/// contiguous, dtype and device the local tensor's; keys: PrivateUse3 (+ its autograd key
/// and ADInplaceOrView, added by TensorImpl). Storage access throws ("Cannot access
/// storage of hyper::DTensorImpl").
class DTensorImpl final : public c10::TensorImpl {
 public:
  explicit DTensorImpl(DTensor dt);

  const DTensor& dtensor() const { return dt_; }

  /// For a view whose local tensor is a copy (it redistributed or copied its input's local):
  /// what it was copied from and when (CopiedView, below); null otherwise. Views of the same
  /// copy (a view of it whose local aliases it) share one.
  const std::shared_ptr<CopiedView>& copied() const { return copied_; }
  void set_copied(std::shared_ptr<CopiedView> c) { copied_ = std::move(c); }
  /// The log of write-backs into this tensor's local by the writable copies taken from it
  /// (made on the first such copy; shared with shallow copies made after it).
  std::shared_ptr<WriteBacks> write_backs() const;

  /// The local tensor laid out as `target` (redistribute_local; the local itself when the
  /// layouts are equal). When the relayout communicates (a Partial reduced, a Shard gathered
  /// or moved; not a RaggedShard, not a local cut of a Replicate) and `memo` is set, the
  /// relaid-out local is remembered and returned again, without communication, to the next
  /// read of the same layout, so a Partial activation read by several ops (a residual stream
  /// read by layer_norm forward and backward, pow forward and backward) is reduced once, and a
  /// sequence-sharded activation read by q, k and v (linear_kernels.h) is gathered once, not
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
  /// collective linear, linear_kernels.h), under local_as's rules (only a relayout that
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
  std::shared_ptr<CopiedView> copied_;
  mutable std::shared_ptr<WriteBacks> write_backs_;  // guarded by memo_mu_
  struct Reduced {
    Layout target;
    uint32_t version, local_version;
    at::Tensor local;
  };
  mutable std::mutex memo_mu_;
  mutable std::shared_ptr<const Reduced> memo_;  // not copied by shallow_copy_and_detach
};

/// How a view op took its output from its input along one dim, for a writable CopiedView.
struct SliceOf {
  int64_t dim = 0;    // normalised
  int64_t start = 0;  // slice: the first global index (normalised, clamped); select: the index
  int64_t step = 1;
  bool select = false;
};
/// slice.Tensor(self, dim, start, end, step) / select.int(self, dim, index) arguments of a
/// DTensor `self` (its global sizes), normalised as ATen does; nullopt for other ops (and for
/// arguments ATen will refuse: it names them).
std::optional<SliceOf> slice_of(const std::string& name, const at::Tensor& self,
                                const c10::IValue* args);

/// Records on the view `out` (a DTensor wrapper whose local is `out_local`), just made from the
/// DTensor wrapper `in` by a view op, whether its local is a copy: a local aliasing `in`'s
/// shares `in`'s CopiedView (none when `in`'s is not a copy either); another is a new copy at
/// `in`'s current version, writable when `slice` says how it was cut from `in` and `out`'s
/// layout is `in`'s with exactly the mesh dims sharding that dim made Replicate (so each rank
/// holds the whole slice, and `in`'s rows of it are where `slice` says). Also for inference
/// tensors (their copies write through; no version counter, so never stale) and `detach()`
/// (an alias: shares `in`'s record).
void track_copied_view(const at::Tensor& in, const at::Tensor& out, const at::Tensor& out_local,
                       const std::optional<SliceOf>& slice);

/// The DTensor inside the DTensor tensor `t`, as stored: no autograd bridge (the kernels run
/// below autograd and read values; hyper::as_dtensor is the differentiable public form).
/// Throws ValueError naming what `t` is when it is not a DTensor tensor.
DTensor dtensor_of(const at::Tensor& t);
/// `dt` as a DTensor tensor with no autograd history of its own (a kernel's output: autograd
/// on the wrapper records the op); hyper::as_tensor is the differentiable public form.
/// Registers hyper's kernels on first use.
at::Tensor wrap_dtensor(DTensor dt);

/// Registers the fallback and the per-op kernels for PrivateUse3 once (thread-safe).
void register_dtensor_kernels();

/// How many calls on this thread the dispatcher's fast path served (remembered decisions run
/// without boxing: `Fast` in dispatch/fallback.cc); for tests.
int64_t fast_path_calls();

}  // namespace hyper::dispatch
