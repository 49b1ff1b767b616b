// hyper-plan: prints the redistribution plan between two layouts, per rank:
// what it keeps, sends and receives, with bytes next to the lower bound, then the
// collective steps each rank runs to execute it (hyper/core/plan_steps.h).
//
//   hyper-plan --src "mesh=[4] placements=[S(0)] shape=[16,64]"
//              --dst "mesh=[4] placements=[RS((0,1),(1,1,1,13))] shape=[16,64]"
//
// Options: --element-size N (bytes per element, default 4), --verify (execute the
// plan on a known array with the reference executor and check the result),
// --summary (totals only).
//
//   hyper-plan --bucket "numels=[4096,64,4096] ranks=3 block=128"
//
// prints the layout of a fully-sharded bucket instead (hyper/core/flat_bucket.h): each rank's
// flat elements and the pieces of the parameters in them.

#include <cstring>
#include <iostream>
#include <numeric>
#include <string>

#include "hyper/core.h"
#include "tools/cli/args.h"

namespace {

int usage(const char* why) {
  if (why) std::cerr << "hyper-plan: " << why << "\n";
  std::cerr << "usage: hyper-plan --src \"<layout>\" --dst \"<layout>\" [--element-size N] "
               "[--verify] [--summary]\n"
               "       hyper-plan --bucket \"numels=[4096,64,4096] ranks=3 block=128\"\n"
               "  a layout reads: mesh=[4] placements=[RS((0,1),(1,1,1,13))] shape=[16,64]\n";
  return 2;
}

// Executes the plan on arange(numel) and compares with slicing. Returns true if exact.
/// The steps of every rank for floating-point elements of `element_size` bytes, and for
/// integral ones where they differ (avg is then not an all_reduce).
void print_steps(const hyper::RedistributePlan& plan, int64_t element_size) {
  for (const bool floating : {true, false}) {
    std::string text;
    bool differs = false;
    for (int64_t r = 0; r < plan.src.mesh().size(); ++r) {
      const auto steps = hyper::plan_steps(plan, r, {element_size, floating});
      differs = differs || steps != hyper::plan_steps(plan, r, {element_size, true});
      text += "  rank " + std::to_string(r) + ":\n" + hyper::steps_to_string(steps, "    ");
    }
    if (!floating && !differs) return;
    std::cout << "steps (" << element_size << "-byte " << (floating ? "floating" : "integral")
              << " elements):\n"
              << text;
  }
}

bool verify(const hyper::RedistributePlan& plan) {
  const auto& src = plan.src;
  const auto& dst = plan.dst;
  if (src.has_partial() || dst.has_partial()) {
    std::cout << "verify: skipped (Partial layouts hold partial values; the test suite covers them)\n";
    return true;
  }
  std::vector<double> global(static_cast<std::size_t>(src.numel()));
  std::iota(global.begin(), global.end(), 0.0);
  std::vector<std::vector<double>> locals;
  for (int64_t r = 0; r < src.mesh().size(); ++r) locals.push_back(hyper::slice_local(src, r, global));
  auto out = hyper::execute_plan(plan, locals);
  for (int64_t r = 0; r < dst.mesh().size(); ++r) {
    if (out[r] != hyper::slice_local(dst, r, global)) {
      std::cout << "verify: rank " << r << " does NOT match slicing the global tensor\n";
      return false;
    }
  }
  std::cout << "verify: every rank's result equals slicing the global tensor\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string src, dst, bucket;
  int64_t element_size = 4;
  bool do_verify = false, summary = false;
  hyper::cli::ArgParser parser({"unknown argument '{arg}'"});
  parser.option({"--src"}, [&](const std::string& v) { src = v; });
  parser.option({"--dst"}, [&](const std::string& v) { dst = v; });
  parser.option({"--bucket"}, [&](const std::string& v) { bucket = v; });
  parser.option({"--element-size"}, [&](const std::string& v) {
    element_size = hyper::cli::parse_integer(v, "--element-size", 1, int64_t{1} << 20,
                                             "a number of bytes per element");
  });
  parser.flag({"--verify"}, [&] { do_verify = true; });
  parser.flag({"--summary"}, [&] { summary = true; });
  parser.help({"-h", "--help"});
  try {
    parser.parse(argc, argv);
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  if (parser.help_requested()) return usage(nullptr), 0;
  if (!bucket.empty()) {
    if (!src.empty() || !dst.empty()) return usage("--bucket takes no --src or --dst");
    try {
      std::cout << hyper::FlatBucketPlan::from_string(bucket).to_string() << "\n";
    } catch (const std::exception& e) {
      std::cerr << "hyper-plan: " << e.what() << "\n";
      return 2;
    }
    return 0;
  }
  if (src.empty() || dst.empty()) return usage("both --src and --dst are required");
  try {
    const auto plan = hyper::plan_redistribute(hyper::Layout::from_string(src),
                                               hyper::Layout::from_string(dst));
    if (summary) {
      std::cout << "plan: " << plan.src.to_string() << " -> " << plan.dst.to_string() << "\n";
      for (int64_t r = 0; r < plan.src.mesh().size(); ++r) {
        const auto& t = plan.traffic[r];
        std::cout << "rank " << r << ": sends " << t.sent * element_size << " B, receives "
                  << t.received * element_size << " B (lower bound " << t.lower_bound * element_size
                  << " B)\n";
      }
      std::cout << "total: " << plan.total_sent() * element_size << " B on the wire, lower bound "
                << plan.total_lower_bound() * element_size << " B\n";
    } else {
      std::cout << plan.to_string(element_size);
    }
    print_steps(plan, element_size);
    if (do_verify && !verify(plan)) return 1;
  } catch (const hyper::NotImplementedError& e) {
    std::cerr << "hyper-plan: not implemented: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "hyper-plan: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
