// hyper::ops at the LibTorch boundary: an error of the local ATen op reaches the caller as
// hyper's error type (docs/errors.md), naming the op, with c10's message and no backtrace.
#include "hyper/tensor/ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor.h"

namespace hyper {
namespace {

template <typename E, typename F>
void expect_error(F&& f, const std::string& prefix, const std::string& part = "") {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << prefix;
  } catch (const c10::Error& e) {
    ADD_FAILURE() << "a c10::Error reached the caller: " << e.what_without_backtrace();
  } catch (const E& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(prefix, 0), 0u) << m;
    EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_EQ(m.find("Exception raised from"), std::string::npos) << m;
  }
}

TEST(OpsErrors, LocalATenErrorsBecomeHyperErrors) {
  comm::testing::run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const DTensor ints = distribute_tensor(at::arange(8, at::kLong).reshape({4, 2}), mesh,
                                           {Shard(0)});
    // c10::NotImplementedError ("... not implemented for 'Long'") -> NotImplementedError.
    expect_error<NotImplementedError>([&] { ops::gelu(ints); }, "hyper::ops::gelu: ");
    // A plain c10::Error on the caller's values -> ValueError.
    expect_error<ValueError>([&] { ops::pow(ints, at::Scalar(int64_t{-1})); },
                             "hyper::ops::pow: ", "Integers to negative integer powers");
    // What works still works.
    EXPECT_TRUE(at::equal(ops::neg(ints).full_tensor(), -at::arange(8, at::kLong).reshape({4, 2})));
  });
}

}  // namespace
}  // namespace hyper
