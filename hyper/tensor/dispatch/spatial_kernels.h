#pragma once
/// \file dispatch/spatial_kernels.h
/// The ops of convolutional networks on DTensor tensors: an unmodified torch::nn
/// CNN (Conv*d, ConvTranspose*d, MaxPool*d, AvgPool*d, Adaptive*Pool*d, BatchNorm*d,
/// GroupNorm, InstanceNorm*d, Upsample, ReflectionPad / ReplicationPad) runs on DTensor inputs
/// and parameters, values and gradients equal to one device's.
///
///   convolution        spatial_rules.h: batch, output-channel, input-channel (Partial) or
///                      Replicate, chosen by bytes; one local convolution per rank with the
///                      local backward of local_op.h (a Replicate weight beside a batch-sharded
///                      input gets a Partial(sum) gradient: data parallelism's all-reduce)
///   pooling, upsampling, reflection / replication padding (the ops listed by
///                      spatial_kernel_names()): computed along the last 1, 2 or 3 (spatial)
///                      dims: a Shard of a spatial dim is gathered, every other Shard kept
///                      (batch, channels), a Partial(sum/avg) passes the linear ones (average
///                      pools, interpolation, padding) and is reduced first for max pools;
///                      max pools' indices are the global ones (a spatial plane is whole on a
///                      rank). A rank holding no elements computes nothing. pixel_shuffle /
///                      pixel_unshuffle likewise along the last 3 dims (channels and plane).
///   batch_norm         training: the batch statistics over every dim but the channels, as
///                      mean / var of the whole DTensor (sharded batch: Partial sums reduced,
///                      i.e. synchronised batch norm: the single-device values), running
///                      statistics updated as ATen does (momentum, unbiased var), plain
///                      buffers or DTensor ones; evaluation: the running statistics,
///                      elementwise, so every layout is kept (channels sharded too)
///   group_norm         mean / var over each group of [N, G, C/G * spatial] (a view of the
///                      input), normalised, the affine per channel
///   (instance_norm reaches batch_norm through ATen's decomposition.)
/// Errors: ATen's checks as ValueError naming op and layouts (spatial_rules.h for convolution;
/// batch_norm: an input below 2 dims, one value per channel in training, missing running
/// statistics in evaluation; group_norm: channels not divisible by groups).

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& spatial_kernels();

}  // namespace hyper::dispatch
