#include "hyper/core/format.h"

#include <gtest/gtest.h>

namespace hyper {
namespace {

TEST(Format, ShapeToString) {
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({7}), "[7]");
  EXPECT_EQ(shape_to_string({2, 3}), "[2,3]");
  EXPECT_EQ(shape_to_string({6, 4, 8}, ", "), "[6, 4, 8]");
  EXPECT_EQ(shape_to_string({-1, 0, int64_t{1} << 40}), "[-1,0,1099511627776]");
}

TEST(Format, JoinInts) {
  EXPECT_EQ(join_ints({}), "");
  EXPECT_EQ(join_ints({5}), "5");
  EXPECT_EQ(join_ints({1, 1, 1, 13}), "1,1,1,13");
  EXPECT_EQ(join_ints({0, 1}, " x "), "0 x 1");
}

}  // namespace
}  // namespace hyper
