#pragma once
/// \file dispatch/testing_dispatch.h
/// Test helpers of the dispatch tests (dispatch_test, matmul_test, view_test): deterministic
/// global tensors, DTensors of them in any placements (Partial with unequal shares, so a rule
/// that forgets a reduction is caught), and comparison with the single-device oracle.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/stats.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::dispatch_testing {

/// Values -2..3 spread over the elements (every rank thread builds the same one).
inline at::Tensor global_a(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return at::linspace(-2.0, 3.0, std::max<int64_t>(n, 1), at::kDouble).slice(0, 0, n).reshape(shape);
}
/// cos(i) + 1.5: > 0, a safe divisor.
inline at::Tensor global_b(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return (at::cos(at::arange(n, at::kDouble)) + 1.5).reshape(shape);
}

/// A DTensor of `global` with `placements`. Partial(sum/avg) mesh dims hold unequal shares
/// (coordinate c holds (c+1)/S of the value, S = 1+...+n; times n for avg); Partial(max/min):
/// coordinate 0 holds the value, coordinate c the value -c / +c.
inline DTensor make(const at::Tensor& global, const DeviceMesh& mesh, const Placements& placements) {
  Placements normal = placements;
  double w = 1.0, shift = 0.0;
  const auto coord = mesh.get_coordinate();
  for (size_t m = 0; m < placements.size(); ++m)
    if (placements[m].is_partial()) {
      normal[m] = Replicate();
      const std::string& op = placements[m].reduce_op();
      if (op == "max" || op == "min") {
        shift += (op == "max" ? -1.0 : 1.0) * coord[m];
        continue;
      }
      const double n = static_cast<double>(mesh.size(static_cast<int64_t>(m)));
      w *= (coord[m] + 1) / (n * (n + 1) / 2);
      if (op == "avg") w *= n;  // the mean of the shares is the value
    }
  const DTensor d = distribute_tensor(global, mesh, normal);
  if (normal == placements) return d;
  return DTensor::from_local_with_layout(d.to_local() * w + shift, mesh,
                                         Layout(mesh.topology(), placements, global.sizes().vec()));
}

/// The global value of a DTensor tensor.
inline at::Tensor full(const at::Tensor& t) { return as_dtensor(t).full_tensor(); }

inline void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, want, 1e-6, 1e-9)) << what << "\ngot\n" << got << "\nwant\n" << want;
}

/// The bytes this rank sent while f ran (hyper's collectives, comm::stats).
inline int64_t bytes_of(const DeviceMesh& mesh, const std::function<void()>& f) {
  const int64_t before = comm::stats(mesh).bytes_sent();
  f();
  return comm::stats(mesh).bytes_sent() - before;
}

/// what() of the E that f throws; "<no error>" or "<another exception type> ..." otherwise.
template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<another exception type> ") + e.what();
  }
  return "<no error>";
}

}  // namespace hyper::dispatch_testing
