#pragma once
/// \file dispatch/testing_case.h
/// One op checked on DTensors against the single-device oracle (index_ops_test,
/// spatial_test): values of every output and the gradients of every floating operand.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/testing_dispatch.h"

namespace hyper::dispatch_testing {

/// The tensor of `g` in `ps` (a plain tensor for an empty placements list).
inline at::Tensor operand(const at::Tensor& g, const DeviceMesh& mesh, const Placements& ps, bool grad) {
  at::Tensor t = ps.empty() ? g.clone() : make(g, mesh, ps).as_tensor();
  if (grad) t.requires_grad_();
  return t;
}

inline std::string name_of(const Placements& ps) { return ps.empty() ? std::string("plain") : to_string(ps); }

/// One op on one device (`want`, from the global operands) and on DTensors (`got`, same op on
/// the DTensor operands): the outputs' values (exactly for a non-Partial floating input, close
/// otherwise) and the gradients of sum(out0 * W) for every floating operand.
struct Case {
  std::string what;
  std::vector<at::Tensor> globals;      ///< operands on one device
  std::vector<Placements> placements;   ///< per operand (empty: plain)
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> op;
};

/// Runs `c`; returns the DTensor outputs (for placement checks).
inline std::vector<at::Tensor> check(const DeviceMesh& mesh, const Case& c) {
  std::vector<at::Tensor> ref, dts;
  for (const at::Tensor& g : c.globals) ref.push_back(g.is_floating_point() ? g.clone().requires_grad_() : g);
  const std::vector<at::Tensor> want = c.op(ref);
  const at::Tensor W = global_b(want[0].sizes().vec());
  if (want[0].requires_grad()) (want[0] * W).sum().backward();
  for (size_t i = 0; i < c.globals.size(); ++i)
    dts.push_back(operand(c.globals[i], mesh, c.placements[i], c.globals[i].is_floating_point()));
  std::vector<at::Tensor> got;
  try {
    got = c.op(dts);
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.what << ": " << e.what();
    return {};
  }
  for (size_t j = 0; j < want.size(); ++j) {
    const at::Tensor g = is_dtensor(got[j]) ? full(got[j]) : got[j];
    if (want[j].is_floating_point())
      expect_close(g, want[j].detach(), c.what + " output " + std::to_string(j));
    else
      EXPECT_TRUE(at::equal(g, want[j])) << c.what << " output " << j << "\ngot\n" << g << "\nwant\n" << want[j];
  }
  if (want[0].requires_grad()) {
    try {
      (got[0] * W).sum().backward();
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.what << " backward: " << e.what();
      return got;
    }
    for (size_t i = 0; i < dts.size(); ++i) {
      if (!ref[i].requires_grad()) continue;
      const at::Tensor gr = dts[i].grad();
      if (!ref[i].grad().defined()) continue;
      if (!gr.defined()) {
        ADD_FAILURE() << c.what << " operand " << i << " has no gradient";
        continue;
      }
      EXPECT_EQ(is_dtensor(gr), !c.placements[i].empty()) << c.what << " operand " << i;
      expect_close(is_dtensor(gr) ? full(gr) : gr, ref[i].grad(),
                   c.what + " gradient of operand " + std::to_string(i));
    }
  }
  return got;
}

}  // namespace hyper::dispatch_testing
