// tensor_split of DTensor tensors as split_with_sizes on the wrapper (see tensor_split_kernels.h).
#include "hyper/tensor/dispatch/tensor_split_kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

/// `dim` normalised, after ATen's checks (with the layout in the message).
int64_t checked_dim(const std::string& where, const at::Tensor& self, int64_t dim) {
  const int64_t rank = self.dim();
  HYPER_CHECK_VALUE(rank > 0, where, ": tensor_split expected at least a 1-dimensional tensor, "
                    "but got a tensor with 0 dims");
  return normalized_dim(dim, rank, where);
}

std::vector<at::Tensor> sections(const at::Tensor& self, c10::SymInt sections_, int64_t dim) {
  const int64_t sections = sections_.expect_int();
  const std::string where = describe_args("aten::tensor_split.sections", {arg_layout(self)}) +
                            " sections=" + std::to_string(sections) + " dim=" + std::to_string(dim);
  const int64_t d = checked_dim(where, self, dim);
  HYPER_CHECK_VALUE(sections > 0, where, ": number of sections must be larger than 0, got ",
                    sections);
  const int64_t n = self.size(d), base = n / sections, extra = n % sections;
  std::vector<int64_t> sizes(static_cast<size_t>(sections), base);
  for (int64_t i = 0; i < extra; ++i) ++sizes[static_cast<size_t>(i)];
  return self.split_with_sizes(sizes, d);
}

std::vector<at::Tensor> indices(const at::Tensor& self, c10::SymIntArrayRef indices_, int64_t dim) {
  std::vector<int64_t> idx;
  for (const auto& i : indices_) idx.push_back(i.expect_int());
  const std::string where = describe_args("aten::tensor_split.indices", {arg_layout(self)}) +
                            " indices=" + shape_to_string(idx) + " dim=" + std::to_string(dim);
  const int64_t d = checked_dim(where, self, dim);
  const int64_t n = self.size(d);
  // slice's normalisation of an endpoint: negative counts from the end, clamped to [0, n].
  auto norm = [n](int64_t v) { return std::min(std::max(v < 0 ? v + n : v, int64_t{0}), n); };
  bool tiles = true;
  int64_t start = 0;
  std::vector<int64_t> sizes;
  for (int64_t i : idx) {
    const int64_t end = norm(i);
    tiles = tiles && end >= start;
    sizes.push_back(end - start);
    start = end;
  }
  sizes.push_back(n - start);
  if (tiles) return self.split_with_sizes(sizes, d);
  // Overlapping pieces: ATen's slices (each piece of a sharded dim gathered on its own).
  std::vector<at::Tensor> pieces;
  int64_t s = 0;
  for (int64_t i : idx) {
    pieces.push_back(self.slice(d, s, i));
    s = i;
  }
  pieces.push_back(self.slice(d, s, n));
  return pieces;
}

}  // namespace

const KernelFamily& tensor_split_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"tensor_split", /*serves_out=*/false, {
      HYPER_KERNEL("aten::tensor_split.sections", K::kBoth, sections),
      HYPER_KERNEL("aten::tensor_split.indices", K::kBoth, indices),
  }};
  return f;
}

}  // namespace hyper::dispatch
