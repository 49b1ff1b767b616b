// The c10 -> hyper error boundary (c10_errors.h): every kind of c10::Error becomes hyper's
// type, with the context and c10's message but not its backtrace.
#include "hyper/comm/c10_errors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "hyper/comm/work.h"

namespace hyper {
namespace {

// Throws `c10_error` inside, maps it with `Fallback` at the boundary, and returns what
// arrives outside (as the exception_ptr of the rethrown error).
template <typename Fallback, typename Thrower>
std::exception_ptr through_boundary(const std::string& context, Thrower&& thrower) {
  try {
    with_c10_errors<Fallback>(context, [&] { thrower(); });
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// Rethrows `p` and checks it is an `E` whose message is exactly `message`.
template <typename E>
void expect_error(const std::exception_ptr& p, const std::string& message) {
  ASSERT_TRUE(p != nullptr) << "nothing was thrown";
  try {
    std::rethrow_exception(p);
  } catch (const c10::Error& e) {
    ADD_FAILURE() << "a c10::Error crossed the boundary: " << e.what_without_backtrace();
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another type arrived: " << e.what();
  }
}

TEST(C10Errors, AGenericErrorBecomesTheFallbackWithContextAndNoBacktrace) {
  auto p = through_boundary<CommError>("all_reduce on group [0,1] (rank 0)", [] {
    TORCH_CHECK(false, "Gloo timed out after ", 5, " ms");
  });
  expect_error<CommError>(p, "all_reduce on group [0,1] (rank 0): Gloo timed out after 5 ms");
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()).find("Exception raised from"), std::string::npos) << e.what();
  }
  expect_error<ValueError>(through_boundary<ValueError>("ctx", [] { TORCH_CHECK(false, "x"); }),
                           "ctx: x");
  expect_error<IOError>(through_boundary<IOError>("ctx", [] { TORCH_CHECK(false, "x"); }),
                        "ctx: x");
  expect_error<InternalError>(
      through_boundary<InternalError>("ctx", [] { TORCH_CHECK(false, "x"); }), "ctx: x");
  expect_error<NotImplementedError>(
      through_boundary<NotImplementedError>("ctx", [] { TORCH_CHECK(false, "x"); }), "ctx: x");
}

TEST(C10Errors, SpecificKindsKeepTheirMeaning) {
  expect_error<ValueError>(
      through_boundary<CommError>("c", [] { TORCH_CHECK_VALUE(false, "bad value 3"); }),
      "c: bad value 3");
  expect_error<ValueError>(
      through_boundary<CommError>("c", [] { TORCH_CHECK_INDEX(false, "index 9 out of range"); }),
      "c: index 9 out of range");
  expect_error<ValueError>(
      through_boundary<CommError>("c", [] { TORCH_CHECK_TYPE(false, "expected Float"); }),
      "c: expected Float");
  expect_error<NotImplementedError>(
      through_boundary<ValueError>("c", [] { TORCH_CHECK_NOT_IMPLEMENTED(false, "no Half"); }),
      "c: no Half");
  expect_error<CommError>(
      through_boundary<ValueError>("c", [] { C10_THROW_ERROR(DistBackendError, "peer gone"); }),
      "c: peer gone");
  expect_error<CommError>(
      through_boundary<ValueError>("c", [] { C10_THROW_ERROR(DistStoreError, "store timeout"); }),
      "c: store timeout");
}

TEST(C10Errors, EmptyContextKeepsJustTheMessage) {
  expect_error<ValueError>(through_boundary<ValueError>("", [] { TORCH_CHECK(false, "plain"); }),
                           "plain");
}

TEST(C10Errors, OutOfMemoryAndNonC10ErrorsPassUnchanged) {
  auto oom =
      through_boundary<ValueError>("c", [] { C10_THROW_ERROR(OutOfMemoryError, "no room"); });
  EXPECT_THROW(std::rethrow_exception(oom), c10::OutOfMemoryError);
  auto ours = through_boundary<CommError>("c", [] { throw ValueError("mine"); });
  expect_error<ValueError>(ours, "mine");
  auto std_err = through_boundary<CommError>("c", [] { throw std::out_of_range("oor"); });
  EXPECT_THROW(std::rethrow_exception(std_err), std::out_of_range);
}

TEST(C10Errors, AnATenCallOnUserTensorsAndTheResultPassesThrough) {
  const at::Tensor a = at::ones({2}), b = at::ones({3});
  EXPECT_TRUE(at::equal(with_c10_errors<ValueError>("add", [&] { return a + a; }), a * 2));
  try {
    with_c10_errors<ValueError>("hyper::ops::add", [&] { return a + b; });
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("hyper::ops::add: The size of tensor a (2) must match", 0), 0u) << m;
    EXPECT_EQ(m.find("Exception raised from"), std::string::npos) << m;
  }
}

TEST(C10Errors, MessageOfDropsTheBacktrace) {
  try {
    TORCH_CHECK(false, "short");
  } catch (const std::exception& e) {
    EXPECT_EQ(message_of(e), "short");
  }
  EXPECT_EQ(message_of(std::runtime_error("plain")), "plain");
}

// The comm and dcp layers' older names are the same types.
TEST(C10Errors, OlderNamesAreTheSameTypes) {
  EXPECT_TRUE((std::is_same_v<comm::CommError, CommError>));
}

}  // namespace
// Gloo throws gloo::IoException (a std::runtime_error, not a c10::Error) from send/recv
// when a peer has gone: it becomes a CommError naming the collective; hyper's own errors
// pass unchanged.
std::exception_ptr through_foreign(const std::string& context, const std::function<void()>& f) {
  try {
    try {
      f();
    } catch (const c10::Error& e) {
      rethrow_c10_error<CommError>(e, context);
    } catch (const std::exception& e) {
      rethrow_foreign_error(e, context);
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

TEST(C10Errors, AForeignExceptionBecomesACommErrorAndHyperErrorsPass) {
  expect_error<CommError>(
      through_foreign("all_gather_v on group [0,1,2] (rank 0)",
                      [] { throw std::runtime_error("Connection closed by peer [127.0.0.1]:1"); }),
      "all_gather_v on group [0,1,2] (rank 0): Connection closed by peer [127.0.0.1]:1");
  expect_error<ValueError>(through_foreign("ctx", [] { throw ValueError("bad sizes"); }),
                           "bad sizes");
  expect_error<IOError>(through_foreign("ctx", [] { throw IOError("disk"); }), "disk");
  expect_error<CommError>(through_foreign("ctx", [] { TORCH_CHECK(false, "x"); }), "ctx: x");
}

}  // namespace hyper
