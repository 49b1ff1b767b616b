#pragma once
/// \file functional.h
/// Differentiable collectives (autograd functions). Every rank must run the backward too
/// (it communicates).
///
/// - all_gather_v: backward = reduce_scatter_v(sum) of the gradient with the same sizes,
///   i.e. rank r's input gradient is the sum over ranks of their output gradients' rows of r.
/// - all_to_all_v: backward = all_to_all_v of the gradient with the splits swapped.
/// - reduce_scatter_v (sum): backward = all_gather_v of the gradient.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "hyper/comm/group.h"

namespace hyper::comm::functional {

at::Tensor all_gather_v(const at::Tensor& input, const Group& group,
                        std::optional<std::vector<int64_t>> sizes = std::nullopt);
at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits, const Group& group);
at::Tensor reduce_scatter_v(const at::Tensor& input, const std::vector<int64_t>& splits,
                            const Group& group);

}  // namespace hyper::comm::functional
