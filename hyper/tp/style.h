#pragma once
/// \file style.h
/// Tensor-parallel styles (PyTorch's torch.distributed.tensor.parallel, in C++): how one
/// hookable module (hyper::nn) is sharded over a 1-D DeviceMesh and which layouts its
/// inputs and outputs have. Applied by hyper::tp::parallelize_module (parallelize.h).
///
/// | style              | module              | parameters                         | input (default)      | output (default)  |
/// |--------------------|---------------------|------------------------------------|----------------------|-------------------|
/// | ColwiseParallel    | Linear              | weight S(0), bias S(0)             | Replicate → R        | S(-1)             |
/// |                    | Embedding           | weight S(1)                        | Replicate → R        | S(-1)             |
/// | RowwiseParallel    | Linear              | weight S(1), bias R (added after the reduction) | S(-1) → S(-1) | P → Replicate |
/// |                    | Embedding           | weight S(0) (ids outside the local rows masked) | Replicate → R | P → Replicate |
/// | SequenceParallel   | any hookable (LayerNorm) | all R, gradients all-reduced  | S(seq) → S(seq)      | S(seq)            |
/// | PrepareModuleInput | any hookable        | untouched                          | given → desired      |                   |
/// | PrepareModuleOutput| any hookable        | untouched                          |                      | given → desired   |
///
/// C++ modules pass at::Tensor between them, so a style's hooks take and return *local*
/// tensors: a pre-hook wraps each input as `DTensor::from_local(x, mesh, input_layouts)`,
/// redistributes it to the layout the computation needs and hands the local tensor to the
/// module; a post-hook wraps the module's local output with its natural layout,
/// redistributes it to `output_layouts` and returns the local tensor. Hence
/// `use_local_output` is true by default for every style (PyTorch's SequenceParallel and
/// PrepareModuleInput default to false because Python can return a DTensor); false is
/// refused (NotImplementedError) at parallelize time.
///
/// Col/Row/Seq boundaries redistribute with `async_op = true` (as PyTorch); Prepare* stay
/// synchronous. `async_op(false)` turns it off for one style (results are identical).
///
/// Gradients equal the single-device module's: replicated inputs of Colwise get the sum of
/// the ranks' partial input gradients (to_local with grad placements Partial), replicated
/// parameters under SequenceParallel get their partial gradients all-reduced (a tensor
/// hook), Rowwise adds the replicated bias after the reduction.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/placement.h"

namespace hyper::nn {
class HookableModule;
}

namespace hyper::trace {
class Observer;
}

namespace hyper::tp {

/// What parallelize_module hands to a style.
struct StyleContext {
  /// The module's name in the root's named_modules() ("" for the root).
  std::string name;
  /// 1-D mesh.
  DeviceMesh mesh;
  /// Told of the style's collectives (issue to completion) and of the module's forward and
  /// the compute overlapped with them (may be null; must outlive the module's use).
  trace::Observer* observer = nullptr;
};

/// Base of every style. Styles are small values; parallelize_module copies them into the
/// module's hooks.
class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  /// "ColwiseParallel(input_layouts=R, output_layouts=S(-1), use_local_output=true)".
  virtual std::string to_string() const = 0;
  /// Shards the module's parameters in place and installs the hooks. Throws ValueError
  /// when the module's type is not supported by the style (naming the supported ones).
  virtual void apply(nn::HookableModule& module, const StyleContext& context) const = 0;
  /// True for styles that own the module's parameters (Col/Row/Seq): a module takes one.
  virtual bool shards_parameters() const { return false; }
};

/// Shards a Linear's output features (weight rows) or an Embedding's embedding dim.
class ColwiseParallel : public ParallelStyle {
 public:
  ColwiseParallel() = default;
  /// Layout of the input as it arrives (default Replicate; Shard(1) after SequenceParallel).
  ColwiseParallel& input_layouts(Placement p) { input_layout_ = std::move(p); return *this; }
  /// Layout the output is redistributed to (default Shard(-1): no communication).
  ColwiseParallel& output_layouts(Placement p) { output_layout_ = std::move(p); return *this; }
  ColwiseParallel& use_local_output(bool v) { use_local_output_ = v; return *this; }
  ColwiseParallel& async_op(bool v) { async_op_ = v; return *this; }

  const Placement& input_layout() const { return input_layout_; }
  const Placement& output_layout() const { return output_layout_; }
  std::string to_string() const override;
  void apply(nn::HookableModule& module, const StyleContext& context) const override;
  bool shards_parameters() const override { return true; }

 private:
  Placement input_layout_ = Replicate();
  Placement output_layout_ = Shard(-1);
  bool use_local_output_ = true;
  bool async_op_ = true;
};

/// Shards a Linear's input features (weight columns; output partial sums reduced) or an
/// Embedding's rows (vocabulary).
class RowwiseParallel : public ParallelStyle {
 public:
  RowwiseParallel() = default;
  /// Default Shard(-1) for Linear, Replicate for Embedding (as PyTorch).
  RowwiseParallel& input_layouts(Placement p) { input_layout_ = std::move(p); return *this; }
  /// Default Replicate (all-reduce); Shard(1) gives a reduce-scatter for SequenceParallel.
  RowwiseParallel& output_layouts(Placement p) { output_layout_ = std::move(p); return *this; }
  RowwiseParallel& use_local_output(bool v) { use_local_output_ = v; return *this; }
  RowwiseParallel& async_op(bool v) { async_op_ = v; return *this; }

  /// The input layout given (std::nullopt: the module type's default).
  const std::optional<Placement>& input_layout() const { return input_layout_; }
  const Placement& output_layout() const { return output_layout_; }
  std::string to_string() const override;
  void apply(nn::HookableModule& module, const StyleContext& context) const override;
  bool shards_parameters() const override { return true; }

 private:
  std::optional<Placement> input_layout_;
  Placement output_layout_ = Replicate();
  bool use_local_output_ = true;
  bool async_op_ = true;
};

/// Runs a module (LayerNorm, or any hookable module acting on each sequence position
/// independently) on the sequence shard: inputs and outputs Shard(sequence_dim),
/// parameters replicated with all-reduced gradients.
class SequenceParallel : public ParallelStyle {
 public:
  explicit SequenceParallel(int64_t sequence_dim = 1) : sequence_dim_(sequence_dim) {}
  /// Layout of the input as it arrives (default Shard(sequence_dim); hyper extension, e.g.
  /// Replicate to take a replicated activation and keep this rank's slice).
  SequenceParallel& input_layouts(Placement p) { input_layout_ = std::move(p); return *this; }
  SequenceParallel& use_local_output(bool v) { use_local_output_ = v; return *this; }
  SequenceParallel& async_op(bool v) { async_op_ = v; return *this; }

  /// The input layout given (std::nullopt: Shard(sequence_dim)).
  const std::optional<Placement>& input_layout() const { return input_layout_; }
  int64_t sequence_dim() const { return sequence_dim_; }
  std::string to_string() const override;
  void apply(nn::HookableModule& module, const StyleContext& context) const override;
  bool shards_parameters() const override { return true; }

 private:
  int64_t sequence_dim_;
  std::optional<Placement> input_layout_;
  bool use_local_output_ = true;
  bool async_op_ = true;
};

/// Redistributes a module's tensor inputs: input i arrives as `input_layouts[i]` and is
/// converted to `desired_input_layouts[i]` (std::nullopt entries leave that input alone).
/// Synchronous. Parameters untouched.
class PrepareModuleInput : public ParallelStyle {
 public:
  PrepareModuleInput(std::vector<std::optional<Placement>> input_layouts,
                     std::vector<std::optional<Placement>> desired_input_layouts,
                     bool use_local_output = true);
  std::string to_string() const override;
  void apply(nn::HookableModule& module, const StyleContext& context) const override;

 private:
  std::vector<std::optional<Placement>> input_layouts_, desired_input_layouts_;
  bool use_local_output_;
};

/// Redistributes a module's output from `output_layouts` to `desired_output_layouts`.
/// Synchronous. Parameters untouched.
class PrepareModuleOutput : public ParallelStyle {
 public:
  PrepareModuleOutput(Placement output_layouts, Placement desired_output_layouts,
                      bool use_local_output = true);
  std::string to_string() const override;
  void apply(nn::HookableModule& module, const StyleContext& context) const override;

 private:
  Placement output_layout_, desired_output_layout_;
  bool use_local_output_;
};

}  // namespace hyper::tp
