#include "hyper/core/scope_exit.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace hyper {
namespace {

TEST(ScopeExit, RunsOnceAtTheEndOfTheScope) {
  int in_flight = 1;
  {
    ScopeExit done([&] { in_flight -= 1; });
    EXPECT_EQ(in_flight, 1);
  }
  EXPECT_EQ(in_flight, 0);
}

TEST(ScopeExit, RunsWhenTheScopeIsLeftByAnException) {
  int in_flight = 1;
  auto wait = [&]() -> int {
    ScopeExit done([&] { in_flight -= 1; });
    throw std::runtime_error("the collective failed");
  };
  EXPECT_THROW(wait(), std::runtime_error);
  EXPECT_EQ(in_flight, 0);
}

}  // namespace
}  // namespace hyper
