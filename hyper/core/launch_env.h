#pragma once
/// \file launch_env.h
/// torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
/// TORCHELASTIC_USE_AGENT_STORE), parsed and checked. Torch-free: the fuzz target of the
/// launch path links it (tools/cli/fuzz/launch_fuzz.cc). init_process_group reads it
/// (hyper/comm/world.h: read_torchrun_env).

#include <map>
#include <string>

namespace hyper {

/// torchrun's variables, parsed and checked.
struct TorchrunEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  /// torchrun 2.x (TORCHELASTIC_USE_AGENT_STORE=True): the launcher's agent already serves the
  /// TCPStore at MASTER_ADDR:MASTER_PORT; every rank connects to it as a client, with no key
  /// prefix (as torch.distributed 2.15 does: a new store per restart attempt).
  bool agent_store = false;
};

/// Parses RANK, WORLD_SIZE, LOCAL_RANK (optional, defaults to RANK), MASTER_ADDR,
/// MASTER_PORT. Throws hyper::ValueError naming the variable and its value: missing
/// variable, not an integer, WORLD_SIZE < 1 or above kMaxMeshSize (2^20, the most devices a
/// mesh holds: mesh_topology.h), RANK < 0, `RANK=5 is not below WORLD_SIZE=4`, LOCAL_RANK out
/// of [0, WORLD_SIZE), empty MASTER_ADDR, MASTER_PORT outside 1..65535.
TorchrunEnv parse_torchrun_env(const std::map<std::string, std::string>& env);

}  // namespace hyper
