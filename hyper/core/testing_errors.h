#pragma once
/// \file testing_errors.h
/// Tests only (not installed): the message of the exception a call throws, for tests of
/// any layer that check what an error says.
///
///   EXPECT_THAT(hyper::testing::error_of([&] { load(dir); }), HasSubstr("missing"));

#include <exception>
#include <string>

namespace hyper::testing {

/// what() of the std::exception `f()` throws, or "(no error)" when it returns.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hyper::testing
