// hyper's error vocabulary (errors.h): the standard bases and the check macros' messages.
#include "hyper/core/errors.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "hyper/core/internal/test_util.h"

namespace hyper {
namespace {

TEST(Errors, TypesDeriveFromTheStandardExceptions) {
  EXPECT_THROW(throw ValueError("v"), std::invalid_argument);
  EXPECT_THROW(throw NotImplementedError("n"), std::logic_error);
  EXPECT_THROW(throw InternalError("i"), std::logic_error);
  EXPECT_THROW(throw CommError("c"), std::runtime_error);
  EXPECT_THROW(throw IOError("o"), std::runtime_error);
  EXPECT_THROW(throw SaveError("s"), std::runtime_error);
  EXPECT_EQ(std::string(IOError("cannot open 'x'").what()), "cannot open 'x'");
}

TEST(Errors, CheckMacrosThrowTheirTypeWithTheStreamedValues) {
  const int64_t n = 63;
  EXPECT_NO_THROW(HYPER_CHECK_VALUE(n == 63, "unused"));
  EXPECT_THROW_MSG(HYPER_CHECK_VALUE(n == 64, "local numel ", n, " (expected ", 64, ")"),
                   ValueError, "local numel 63 (expected 64)");
  EXPECT_THROW_MSG(HYPER_CHECK_IMPLEMENTED(n < 0, "route ", n), NotImplementedError, "route 63");
  try {
    HYPER_CHECK_INTERNAL(n % 2 == 0, "plan of ", n, " steps");
    ADD_FAILURE() << "no throw";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()), "internal error: plan of 63 steps (n % 2 == 0 is false)");
  }
}

}  // namespace
}  // namespace hyper
