#pragma once
/// \file hyperrun_options.h
/// hyperrun's command line, parsed and checked (torch-free; shared by tools/hyperrun.cc and
/// its fuzz target, tools/cli/fuzz/launch_fuzz.cc). docs/hyperrun.md.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hyper::cli {

constexpr int kMaxRanks = 1024;  ///< per node
constexpr int kMaxNodes = 65536;
constexpr int64_t kMaxWorldSize = int64_t{1} << 20;
/// --timeout's upper bound: the deadline is steady_clock::now() + timeout in nanoseconds
/// (int64, about 292 years), so 1e9 s (about 31.7 years) always fits.
constexpr double kMaxTimeoutSeconds = 1e9;

struct HyperrunOptions {
  bool help = false;
  int nproc = 0;  // 0: not given
  int nnodes = 1;
  int node_rank = 0;
  std::optional<std::string> master_addr;  // default 127.0.0.1 on a single node
  int master_port = 0;  // 0: pick a free one (single node) or 29500 (several)
  double timeout_s = 0;  // 0: none
  std::vector<std::string> command;
};

/// Parses hyperrun's arguments (argv[0] is the program name). Throws UsageError
/// (tools/cli/args.h) naming the option and value: an unknown option, a missing value, a
/// number out of its range (ranks 1..1024 per node, nodes 1..65536, node rank below
/// --nnodes, a TCP port, a timeout in (0, 1e9] s), an elastic --nnodes range, more than
/// 2^20 ranks in all, several nodes without --master-addr, no program. With -h/--help
/// returns at once with `help` set.
HyperrunOptions parse_hyperrun_args(int argc, char** argv);

}  // namespace hyper::cli
