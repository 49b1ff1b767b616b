// Tests of hyper/core/launch_env.h beyond hyper/comm/world_test.cc's (which needs LibTorch):
// the limits found by launch_fuzz (tools/cli/fuzz/launch_fuzz.cc).
#include "hyper/core/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "hyper/core/errors.h"
#include "hyper/core/internal/test_util.h"

namespace hyper {
namespace {

std::map<std::string, std::string> env_of(const std::string& rank, const std::string& world) {
  return {{"RANK", rank}, {"WORLD_SIZE", world}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
}

// Found by launch_fuzz: WORLD_SIZE=2147483647 was accepted, a world no mesh can hold (a mesh
// has at most 2^20 devices, as many ranks as hyperrun starts); init_process_group would wait
// for 2^31 workers before the world mesh refused it.
TEST(TorchrunEnvLimits, WorldSizeIsAtMostAMesh) {
  const TorchrunEnv e = parse_torchrun_env(env_of("1048575", "1048576"));
  EXPECT_EQ(e.world_size, 1048576);
  EXPECT_EQ(e.rank, 1048575);
  EXPECT_EQ(e.local_rank, 1048575);
  EXPECT_THROW_MSG(parse_torchrun_env(env_of("0", "1048577")), ValueError,
                   "WORLD_SIZE=1048577 is more than the 1048576 ranks a mesh holds");
  EXPECT_THROW_MSG(parse_torchrun_env(env_of("2147483646", "2147483647")), ValueError,
                   "WORLD_SIZE=2147483647 is more than the 1048576 ranks");
  // Still checked after the integer parse: out of int32 and not an integer stay as they were.
  EXPECT_THROW_MSG(parse_torchrun_env(env_of("0", "2147483648")), ValueError,
                   "WORLD_SIZE=2147483648 is out of range");
  EXPECT_THROW_MSG(parse_torchrun_env(env_of("0", "0")), ValueError,
                   "WORLD_SIZE=0 must be at least 1");
}

}  // namespace
}  // namespace hyper
