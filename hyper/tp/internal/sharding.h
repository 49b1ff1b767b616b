#pragma once
/// \file internal/sharding.h
/// What hyper::tp records on a parallelized module (HookableModule attribute
/// kParamShardingKey): how each of its own parameters was sharded, for state_dict().

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/placement.h"

namespace hyper::tp::internal {

inline constexpr const char* kParamShardingKey = "hyper.tp.param_sharding";

struct ParamSharding {
  DeviceMesh mesh;
  Placements placements;             ///< on `mesh`
  std::vector<int64_t> global_shape;  ///< the parameter before sharding
};

/// Parameter name (the module's own, non-recursive) → sharding, plus the style's text.
struct ModuleSharding {
  std::string style;
  std::map<std::string, ParamSharding> params;
};

}  // namespace hyper::tp::internal
