#include "hyper/fsdp/fully_shard.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <any>
#include <set>
#include <utility>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/fsdp/flat_bucket.h"
#include "hyper/nn/hookable.h"
#include "hyper/nn/parameters.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::fsdp {
namespace internal {

namespace {
const char* const kAttribute = "hyper.fsdp";

enum class State { kSharded, kGathering, kUnsharded };

const char* to_string(State s) {
  switch (s) {
    case State::kSharded: return "sharded";
    case State::kGathering: return "gathering";
    case State::kUnsharded: return "unsharded";
  }
  return "?";
}

/// A tensor on `view`'s storage, offset, sizes and strides with a version counter of its own:
/// the all-gather's in-place writes into the buffer must not look like in-place changes of
/// the parameters autograd saved.
at::Tensor alias_of(const at::Tensor& view) {
  at::NoGradGuard no_grad;
  at::Tensor t = at::empty({0}, view.options());
  t.set_(view.storage(), view.storage_offset(), view.sizes(), view.strides());
  return t;
}

/// Gives `t`'s storage `nbytes` (fresh memory from its allocator) or frees it (0): every
/// tensor on the storage keeps its sizes and sees the new memory.
void resize_storage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (nbytes == 0) {
    s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  } else {
    s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  }
  s->set_nbytes(nbytes);
}
}  // namespace

class Bucket;

/// What one root forward and its backward share: the buckets in the order their forward
/// began (recorded on the root's first forward; prefetch follows it, reversed in backward).
struct Run {
  torch::nn::Module* root = nullptr;
  std::vector<std::weak_ptr<Bucket>> order;
  bool recorded = false;
  std::vector<std::weak_ptr<Bucket>> backward_buckets;
  std::vector<std::weak_ptr<Bucket>> reducing;
  bool callback_queued = false;
};

/// The root whose forward is running on this thread (a thread is a rank in thread mode).
thread_local std::shared_ptr<Run> t_active;

class Bucket : public std::enable_shared_from_this<Bucket> {
 public:
  Bucket(torch::nn::Module& module, const DeviceMesh& mesh, const FsdpOptions& o)
      : options_(o), module_(&module), mesh_(mesh) {}

  void build(std::vector<std::vector<std::pair<torch::nn::Module*, std::string>>> holders,
             const std::vector<at::Tensor>& params) {
    holders_ = std::move(holders);
    for (const auto& p : params) requires_grad_.push_back(p.requires_grad());
    if (params.empty()) return;
    dtype_ = params[0].scalar_type();
    param_dtype_ = options_.mp_policy.param_dtype.value_or(dtype_);
    reduce_dtype_ = options_.mp_policy.reduce_dtype.value_or(param_dtype_);
    {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> values;
      for (const auto& p : params) values.push_back(p.detach());
      // Tensor-parallel parameters (DTensors on the mesh's dim 1): sharded over dim 0, the
      // data-parallel dim (FlatBucket checks the rest).
      const bool tp = is_dtensor(values[0]);
      fb_ = std::make_unique<FlatBucket>(mesh_, values, options_.shard_block, tp ? 0 : -1);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor s = as_tensor(fb_->param(static_cast<int64_t>(i)));
      s.set_requires_grad(requires_grad_[i]);
      sharded_.push_back(s);
    }
    show(sharded_);
  }

  // ---- gathering ---------------------------------------------------------------------------

  void unshard_async() {
    if (!fb_ || state_ != State::kSharded) return;
    const int64_t numel = fb_->plan().numel();
    if (!full_.defined()) {
      full_ = at::empty({numel}, fb_->shard().options().dtype(param_dtype_));
      const std::vector<at::Tensor> views = fb_->views(full_);
      for (size_t i = 0; i < views.size(); ++i) {
        at::Tensor leaf = alias_of(views[i]);
        leaf.set_requires_grad(requires_grad_[i]);
        if (requires_grad_[i]) {
          torch::autograd::impl::set_post_acc_grad_hooks(
              leaf, std::make_unique<GradReady>(weak_from_this()));
        }
        leaves_.push_back(leaf);
      }
    } else {
      resize_storage(full_, static_cast<size_t>(numel) * full_.element_size());
    }
    std::optional<at::Tensor> source;
    if (param_dtype_ != dtype_) {
      source = fb_->shard().to(param_dtype_);
      cast_bytes_ += source->numel() * source->element_size();
    }
    work_ = fb_->unshard_async(full_, source);
    state_ = State::kGathering;
  }

  void unshard() {
    unshard_async();
    if (state_ == State::kGathering) {
      work_->wait();
      work_.reset();
      state_ = State::kUnsharded;
    }
  }

  void reshard() {
    if (state_ == State::kGathering) {
      work_->wait();
      work_.reset();
    }
    if (state_ != State::kSharded && full_.defined()) resize_storage(full_, 0);
    state_ = State::kSharded;
  }

  /// The parameters as forward sees them: the leaves viewing the gathered buffer, or under
  /// tensor parallelism DTensor tensors on the tp mesh whose locals are the leaves (made each
  /// forward: differentiable, their gradients reach the leaves).
  std::vector<at::Tensor> gathered() const {
    if (!fb_ || !fb_->tensor_parallel()) return leaves_;
    std::vector<at::Tensor> out;
    const DeviceMesh tp_mesh = mesh_[1 - fb_->shard_dim()];
    for (size_t i = 0; i < leaves_.size(); ++i) {
      const auto p = static_cast<int64_t>(i);
      out.push_back(as_tensor(DTensor::from_local(leaves_[i], tp_mesh, {fb_->tp_placement(p)},
                                                  fb_->global_shape(p))));
    }
    return out;
  }

  /// Registers `tensors` as the module's parameters (every holder of each).
  void show(const std::vector<at::Tensor>& tensors) {
    for (size_t i = 0; i < tensors.size(); ++i)
      for (const auto& [owner, name] : holders_[i])
        nn::replace_parameter(*owner, name, tensors[i]);
  }

  // ---- hooks -------------------------------------------------------------------------------

  nn::Tensors pre_forward(const nn::Tensors& inputs) {
    std::shared_ptr<Run> run;
    if (!t_active) {
      t_active = run_;
      run = run_;
    } else {
      run = t_active;
      run_ = run;
    }
    const auto self = shared_from_this();
    if (!run->recorded && index_in(run->order) < 0) run->order.push_back(self);
    unshard();
    show(gathered());
    std::vector<std::shared_ptr<Bucket>> next;
    if (run->recorded) {
      const int64_t i = index_in(run->order);
      if (i >= 0 && i + 1 < static_cast<int64_t>(run->order.size()))
        if (auto n = run->order[static_cast<size_t>(i + 1)].lock()) next.push_back(n);
    }
    for (const auto& n : next) n->unshard_async();
    if (!fb_ || !options_.mp_policy.cast_forward_inputs || param_dtype_ == dtype_) return inputs;
    nn::Tensors cast = inputs;
    for (auto& t : cast)
      if (t.defined() && at::isFloatingType(t.scalar_type())) t = t.to(param_dtype_);
    return cast;
  }

  void post_forward(const at::Tensor& output) {
    const std::shared_ptr<Run> run = run_;
    show(sharded_);
    // The root's parameters stay gathered: backward needs them first (FSDP2 does the same).
    if (options_.reshard_after_forward && module_ != run->root) reshard();
    if (at::GradMode::is_enabled() && output.defined() && output.requires_grad()) {
      if (index_in(run->backward_buckets) < 0) run->backward_buckets.push_back(weak_from_this());
      std::weak_ptr<Bucket> weak = weak_from_this();
      output.register_hook([weak](const at::Tensor&) {
        if (auto b = weak.lock()) b->pre_backward();
      });
    }
    if (t_active == run && module_ == run->root) {
      t_active.reset();
      run->recorded = true;
    }
  }

  void pre_backward() {
    const std::shared_ptr<Run> run = run_;
    if (!run->callback_queued) {
      run->callback_queued = true;
      std::weak_ptr<Run> weak = run;
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto r = weak.lock()) finish(*r);
      });
    }
    if (pre_backward_done_) return;
    pre_backward_done_ = true;
    unshard();
    // Backward meets the root first (its outputs), then the others in reverse.
    std::vector<std::weak_ptr<Bucket>> backward(run->order.begin(), run->order.begin() + 1);
    backward.insert(backward.end(), run->order.rbegin(), run->order.rend() - 1);
    const int64_t i = index_in(backward);
    if (i >= 0 && i + 1 < static_cast<int64_t>(backward.size()))
      if (auto b = backward[static_cast<size_t>(i + 1)].lock())
        if (!b->pre_backward_done_) b->unshard_async();
  }

  void grad_ready() {
    ++grads_ready_;
    if (grads_ready_ == std::count(requires_grad_.begin(), requires_grad_.end(), true))
      post_backward();
  }

  /// Every gradient of this backward is in: reduce-scatter them (unless gradient sync is
  /// off) and free the gathered buffer.
  void post_backward() {
    if (reduced_ || !fb_) return;
    reduced_ = true;
    bool any = false;
    for (const auto& l : leaves_) any = any || l.grad().defined();
    if (requires_gradient_sync_ && any) {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> grads;
      for (size_t i = 0; i < leaves_.size(); ++i) {
        at::Tensor g = requires_grad_[i] ? leaves_[i].grad() : at::Tensor();
        if (g.defined() && g.scalar_type() != param_dtype_) {
          g = g.to(param_dtype_);
          cast_bytes_ += g.numel() * g.element_size();
        }
        grads.push_back(g);
        if (requires_grad_[i]) leaves_[i].mutable_grad().reset();
      }
      // A wider reduce dtype is where the sum accumulates (the gradients travel as they are);
      // a narrower one is a cast first.
      if (c10::elementSize(reduce_dtype_) <= c10::elementSize(param_dtype_) &&
          reduce_dtype_ != param_dtype_) {
        for (auto& g : grads)
          if (g.defined()) {
            g = g.to(reduce_dtype_);
            cast_bytes_ += g.numel() * g.element_size();
          }
      }
      at::Tensor out = at::empty({fb_->shard().numel()}, fb_->shard().options().dtype(reduce_dtype_));
      grad_work_ = fb_->reduce_scatter_grads_async(grads, comm::ReduceOp::kAvg, out);
      // One reduction in flight: the previous bucket's completes now (it ran while this
      // bucket's backward computed), freeing the unsharded gradients it read.
      auto& pending = run_->reducing;
      for (auto& w : pending)
        if (auto b = w.lock()) b->complete_reduce();
      pending.assign(1, weak_from_this());
    }
    reshard();
  }

  /// Waits for this bucket's reduce-scatter; the gradient shard becomes the sharded
  /// parameters' gradients (added to gradients already there).
  void complete_reduce() {
    if (!grad_work_) return;
    at::Tensor shard = grad_work_->wait();
    grad_work_.reset();
    at::NoGradGuard no_grad;
    if (shard.scalar_type() != dtype_) {
      shard = shard.to(dtype_);
      cast_bytes_ += shard.numel() * shard.element_size();
    }
    for (size_t i = 0; i < sharded_.size(); ++i) {
      if (!requires_grad_[i]) continue;
      at::Tensor g = as_tensor(fb_->param_over(static_cast<int64_t>(i), shard));
      at::Tensor& sg = sharded_[i].mutable_grad();
      if (!sg.defined()) {
        sg = g;
      } else {
        sg.add_(g);
      }
    }
  }

  void finish_backward() {
    if (!reduced_ && grads_ready_ > 0) post_backward();  // parameters without a gradient: zeros
    complete_reduce();
    reshard();
    pre_backward_done_ = false;
    grads_ready_ = 0;
    reduced_ = false;
  }

  static void finish(Run& run) {
    run.callback_queued = false;
    std::vector<std::shared_ptr<Bucket>> bs;
    for (auto& w : run.backward_buckets)
      if (auto b = w.lock()) bs.push_back(b);
    for (auto& b : bs) b->finish_backward();
    run.backward_buckets.clear();
    run.reducing.clear();
  }

  // ---- accessors ---------------------------------------------------------------------------

  void set_run(std::shared_ptr<Run> r) { run_ = std::move(r); }
  torch::nn::Module& module() const { return *module_; }
  const FlatBucket* flat() const { return fb_.get(); }
  const std::vector<at::Tensor>& sharded() const { return sharded_; }
  State state() const { return state_; }
  const at::Tensor& full() const { return full_; }
  int64_t copied_bytes() const { return cast_bytes_ + (fb_ ? fb_->copied_bytes() : 0); }
  bool requires_gradient_sync_ = true;
  FsdpOptions options_;

 private:
  struct GradReady : torch::autograd::PostAccumulateGradHook {
    explicit GradReady(std::weak_ptr<Bucket> b) : bucket(std::move(b)) {}
    void operator()(const torch::autograd::Variable&) override {
      if (auto b = bucket.lock()) b->grad_ready();
    }
    std::weak_ptr<Bucket> bucket;
  };

  int64_t index_in(const std::vector<std::weak_ptr<Bucket>>& v) const {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].lock().get() == this) return static_cast<int64_t>(i);
    return -1;
  }

  torch::nn::Module* module_;
  DeviceMesh mesh_;
  std::vector<std::vector<std::pair<torch::nn::Module*, std::string>>> holders_;
  std::vector<bool> requires_grad_;
  std::unique_ptr<FlatBucket> fb_;
  std::vector<at::Tensor> sharded_, leaves_;
  at::Tensor full_;
  State state_ = State::kSharded;
  std::optional<comm::Work> work_;
  at::ScalarType dtype_ = at::kFloat, param_dtype_ = at::kFloat, reduce_dtype_ = at::kFloat;
  int64_t cast_bytes_ = 0;
  bool pre_backward_done_ = false;
  int64_t grads_ready_ = 0;
  bool reduced_ = false;
  std::optional<comm::Work> grad_work_;
  std::shared_ptr<Run> run_;

};

}  // namespace internal

using internal::Bucket;

namespace {

std::shared_ptr<Bucket> bucket_of(torch::nn::Module& m) {
  auto* h = dynamic_cast<nn::HookableModule*>(&m);
  if (h == nullptr) return nullptr;
  const std::any* a = h->attribute(internal::kAttribute);
  return a == nullptr ? nullptr : std::any_cast<std::shared_ptr<Bucket>>(*a);
}

}  // namespace

FsdpModule fully_shard(const std::shared_ptr<torch::nn::Module>& module, const DeviceMesh& mesh,
                       const FsdpOptions& options) {
  HYPER_CHECK_VALUE(module != nullptr, "hyper::fsdp::fully_shard: the module is null");
  auto hookable = std::dynamic_pointer_cast<nn::HookableModule>(module);
  HYPER_CHECK_VALUE(hookable != nullptr, "hyper::fsdp::fully_shard: ", module->name(),
                    " has no forward hooks (LibTorch modules have none): wrap it as "
                    "hyper::nn::Hooked<", module->name(), ">");
  HYPER_CHECK_VALUE(hookable->forward_returns_tensor(), "hyper::fsdp::fully_shard: ",
                    module->name(), "'s forward must return one at::Tensor (its output's "
                    "gradient starts the module's backward)");
  HYPER_CHECK_VALUE(bucket_of(*module) == nullptr, "hyper::fsdp::fully_shard: ", module->name(),
                    " was already given to fully_shard");
  HYPER_CHECK_VALUE(mesh.defined() && (mesh.ndim() == 1 || mesh.ndim() == 2),
                    "hyper::fsdp::fully_shard: the mesh must be 1-D (shard) or 2-D (replicate, "
                    "shard: HSDP; or dp, tp for tensor-parallel parameters), got ",
                    mesh.defined() ? mesh.to_string() : std::string("an undefined mesh"));
  HYPER_CHECK_VALUE(options.shard_block >= 1, "hyper::fsdp::fully_shard: shard_block must be >= 1, got ",
                    options.shard_block);
  for (const auto& [name, d] : {std::pair<const char*, std::optional<at::ScalarType>>{
                                    "param_dtype", options.mp_policy.param_dtype},
                                {"reduce_dtype", options.mp_policy.reduce_dtype}}) {
    HYPER_CHECK_VALUE(!d || at::isFloatingType(*d), "hyper::fsdp::fully_shard: mp_policy.", name,
                      " must be a floating dtype, got ", *d);
  }
  // The sharded parameters of the buckets inside (inner fully_shard calls).
  std::set<const c10::TensorImpl*> inner;
  for (const auto& item : module->named_modules("", /*include_self=*/false))
    if (auto b = bucket_of(*item.value()))
      for (const auto& s : b->sharded()) inner.insert(s.unsafeGetTensorImpl());
  // The parameters to shard, by (module, path, name), checked before any is held here.
  struct Found {
    torch::nn::Module* module;
    std::string module_path, name, path;
  };
  std::vector<Found> found;
  for (const auto& item : module->named_modules("", /*include_self=*/true)) {
    torch::nn::Module& m = *item.value();
    for (const auto& key : m.named_parameters(/*recurse=*/false).keys()) {
      const at::Tensor t = nn::registered_parameter(m, key);
      if (!t.defined() || inner.count(t.unsafeGetTensorImpl()) > 0) continue;
      const std::string path = item.key().empty() ? key : item.key() + "." + key;
      HYPER_CHECK_VALUE(t.dim() > 0 && t.numel() > 0, "hyper::fsdp::fully_shard: parameter '",
                        path, "' has shape ", t.sizes(),
                        "; a RaggedShard needs at least one dim and one element");
      found.push_back({&m, item.key(), key, path});
    }
  }
  for (const Found& f : found) nn::check_replaceable(*f.module, f.module_path, f.name);
  // Each parameter once, with every (module, name) that registers it.
  std::vector<at::Tensor> params;
  std::vector<std::vector<std::pair<torch::nn::Module*, std::string>>> holders;
  std::vector<std::string> paths;
  for (const Found& f : found) {
    const at::Tensor t = nn::registered_parameter(*f.module, f.name);
    auto it = std::find_if(params.begin(), params.end(),
                           [&](const at::Tensor& q) { return q.is_same(t); });
    if (it == params.end()) {
      params.push_back(t);
      holders.emplace_back();
      paths.push_back(f.path);
      it = params.end() - 1;
    }
    holders[static_cast<size_t>(it - params.begin())].emplace_back(f.module, f.name);
  }
  for (size_t i = 1; i < params.size(); ++i)
    HYPER_CHECK_VALUE(params[i].scalar_type() == params[0].scalar_type(),
                      "hyper::fsdp::fully_shard: one dtype per bucket: parameter '", paths[i],
                      "' is ", params[i].scalar_type(), ", '", paths[0], "' ",
                      params[0].scalar_type());
  auto bucket = std::make_shared<Bucket>(*module, mesh, options);
  bucket->build(std::move(holders), params);
  auto run = std::make_shared<internal::Run>();
  run->root = module.get();
  bucket->set_run(run);
  hookable->set_attribute(internal::kAttribute, bucket);
  std::weak_ptr<Bucket> weak = bucket;
  hookable->register_forward_pre_hook(
      [weak](torch::nn::Module&, const nn::Tensors& inputs) -> std::optional<nn::Tensors> {
        auto b = weak.lock();
        if (!b) return std::nullopt;
        return b->pre_forward(inputs);
      });
  hookable->register_forward_hook(
      [weak](torch::nn::Module&, const nn::Tensors&, const at::Tensor& out)
          -> std::optional<at::Tensor> {
        if (auto b = weak.lock()) b->post_forward(out);
        return std::nullopt;
      });
  return FsdpModule(bucket);
}

FsdpModule fsdp_module(const std::shared_ptr<torch::nn::Module>& module) {
  HYPER_CHECK_VALUE(module != nullptr, "hyper::fsdp::fsdp_module: the module is null");
  auto b = bucket_of(*module);
  HYPER_CHECK_VALUE(b != nullptr, "hyper::fsdp::fsdp_module: ", module->name(),
                    " was not given to fully_shard");
  return FsdpModule(b);
}

void FsdpModule::unshard(bool async_op) {
  async_op ? bucket_->unshard_async() : bucket_->unshard();
}
void FsdpModule::reshard() { bucket_->reshard(); }
void FsdpModule::set_requires_gradient_sync(bool v, bool recurse) {
  bucket_->requires_gradient_sync_ = v;
  if (recurse)
    for (const auto& m : bucket_->module().modules(/*include_self=*/false))
      if (auto b = bucket_of(*m)) b->requires_gradient_sync_ = v;
}
void FsdpModule::set_reshard_after_forward(bool v, bool recurse) {
  bucket_->options_.reshard_after_forward = v;
  if (recurse)
    for (const auto& m : bucket_->module().modules(/*include_self=*/false))
      if (auto b = bucket_of(*m)) b->options_.reshard_after_forward = v;
}
std::string FsdpModule::plan() const {
  return bucket_->flat() ? bucket_->flat()->plan().to_string() : "flat bucket: no parameters";
}
int64_t FsdpModule::copied_bytes() const { return bucket_->copied_bytes(); }
std::string FsdpModule::state() const { return internal::to_string(bucket_->state()); }
at::Tensor FsdpModule::gathered() const { return bucket_->full(); }

}  // namespace hyper::fsdp
