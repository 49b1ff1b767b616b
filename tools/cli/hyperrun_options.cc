#include "tools/cli/hyperrun_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tools/cli/args.h"

namespace hyper::cli {

namespace {

int parse_int(const std::string& text, const std::string& option, int lo, int hi,
              const char* what) {
  return static_cast<int>(parse_integer(text, option, lo, hi, what));
}

/// A number of seconds in (0, kMaxTimeoutSeconds]; larger values would overflow the deadline.
double parse_seconds(const std::string& text, const std::string& option) {
  char* end = nullptr;
  errno = 0;
  double value = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(value) ||
      value <= 0 || value > kMaxTimeoutSeconds) {
    throw UsageError("invalid value for " + option + ": '" + text +
                     "' (expected a number of seconds > 0 and at most 1000000000)");
  }
  return value;
}

/// torchrun's --nnodes: "M" or "M:M"; an elastic range "MIN:MAX" with MIN != MAX is refused.
int parse_nnodes(const std::string& text, const std::string& option) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return parse_int(text, option, 1, kMaxNodes, "a number of nodes");
  const std::string lo = text.substr(0, colon);
  const std::string hi = text.substr(colon + 1);
  if (lo != hi) {
    throw UsageError("unsupported value for " + option + ": '" + text +
                     "' (elastic ranges are not supported; give one number of nodes)");
  }
  return parse_int(lo, option, 1, kMaxNodes, "a number of nodes");
}

}  // namespace

HyperrunOptions parse_hyperrun_args(int argc, char** argv) {
  HyperrunOptions o;
  hyper::cli::ArgParser p({"unknown option '{arg}'", "option {name} requires a value",
                           "option {name} takes no value (got '{arg}')"},
                          hyper::cli::Positionals::kStopAtFirst);
  p.help({"-h", "--help"});
  p.option({"-n", "--nproc-per-node"}, [&](const std::string& v, const std::string& name) {
    o.nproc = parse_int(v, name, 1, kMaxRanks, "a number of ranks");
  });
  p.option({"--master-port"}, [&](const std::string& v, const std::string& name) {
    o.master_port = parse_int(v, name, 1, 65535, "a TCP port");
  });
  p.option({"--master-addr"}, [&](const std::string& v) {
    if (v.empty()) throw UsageError("invalid value for --master-addr: '' (empty)");
    o.master_addr = v;
  });
  p.option({"--nnodes"}, [&](const std::string& v, const std::string& name) {
    o.nnodes = parse_nnodes(v, name);
  });
  p.option({"--node-rank"}, [&](const std::string& v, const std::string& name) {
    o.node_rank = parse_int(v, name, 0, kMaxNodes - 1, "a node index");
  });
  p.option({"--timeout"}, [&](const std::string& v, const std::string& name) {
    o.timeout_s = parse_seconds(v, name);
  });
  p.flag({"--standalone", "--no-python"}, [] {});
  o.command = p.parse(argc, argv);
  if (p.help_requested()) {
    o.help = true;
    return o;
  }
  if (o.nproc == 0) throw UsageError("missing -n N (the number of ranks to start)");
  if (o.node_rank >= o.nnodes) {
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " +
                     std::to_string(o.nnodes));
  }
  if (static_cast<int64_t>(o.nnodes) * o.nproc > kMaxWorldSize) {
    throw UsageError("--nnodes " + std::to_string(o.nnodes) + " times -n " +
                     std::to_string(o.nproc) + " is " +
                     std::to_string(static_cast<int64_t>(o.nnodes) * o.nproc) +
                     " ranks, more than the " + std::to_string(kMaxWorldSize) +
                     " hyperrun supports");
  }
  if (o.nnodes > 1 && !o.master_addr) {
    throw UsageError("--nnodes " + std::to_string(o.nnodes) +
                     " needs --master-addr (the address of node 0, where rank 0 serves the "
                     "rendezvous store)");
  }
  if (o.command.empty()) throw UsageError("no program to run given after the options");
  return o;
}


}  // namespace hyper::cli
