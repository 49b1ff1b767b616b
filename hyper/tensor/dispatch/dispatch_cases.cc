// dispatch_cases: runs the op/layout catalogue of tests/pytorch_compare/cases.json through
// hyper's DTensor-as-at::Tensor dispatch (dtensor_tensor.h) on threads as ranks and writes, per
// case, the output placements and the full tensor, or the refusal. The same catalogue runs
// through PyTorch DTensor in tests/pytorch_compare/compare_dtensor.py, which compares the two
// (docs/dtensor.md "Compared with PyTorch DTensor").
//
//   dispatch_cases CASES.json OUT.json [--only ID-SUBSTRING]
//
// Output: {"cases": [{"id", "op", "mesh", "inputs": [{"placements", "shape"}], and either
// "status": "ok", "placements": ["S(0)", ...], "shape": [...], "values": [flat row-major], or
// "status": "error", "type": "NotImplementedError" | "ValueError" | "c10::Error" |
// "std::exception", "message"}]}. A failure on some ranks only is reported with the first
// failed rank's exception, its message prefixed "on rank(s) [...] only: ".
// Inputs and ops: testing_cases.h (shared with catalogue_test.cc): testing_dispatch.h's global_a /
// global_b and make (Partial with unequal shares);
// compare_dtensor.py builds the same values and shares on the PyTorch side.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/testing_cases.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using nlohmann::json;

using dispatch_testing::case_tensor;
using dispatch_testing::ints;
using dispatch_testing::run_op;

json error_entry(const char* type, const std::string& message) {
  return {{"status", "error"}, {"type", type}, {"message", message}};
}

/// Runs `f`; an entry {"status": "error", ...} for what it throws, an empty object otherwise.
template <typename F>
json catching(F&& f) {
  try {
    f();
  } catch (const NotImplementedError& e) {
    return error_entry("NotImplementedError", e.what());
  } catch (const ValueError& e) {
    return error_entry("ValueError", e.what());
  } catch (const c10::Error& e) {
    return error_entry("c10::Error", e.what_without_backtrace());
  } catch (const std::exception& e) {
    return error_entry("std::exception", e.what());
  }
  return json::object();
}

/// How many ranks of `mesh` pass a non-zero `failed` (a P(sum) scalar over every mesh dim,
/// gathered: a collective of all ranks).
int64_t count_failed(bool failed, const DeviceMesh& mesh) {
  const Placements all_partial(static_cast<size_t>(mesh.ndim()), Partial());
  const DTensor d = DTensor::from_local_with_layout(at::full({1}, failed ? 1.0 : 0.0, at::kDouble), mesh,
                                                    Layout(mesh.topology(), all_partial, {1}));
  return static_cast<int64_t>(d.full_tensor().item<double>() + 0.5);
}

/// One case on this rank: its entry (rank 0's is written). The op's input redistributions
/// run on every rank alike; its local computation may fail on some ranks only (an empty
/// shard): the ranks agree on that before the full_tensor collective.
json run_case(const json& c, const DeviceMesh& mesh) {
  at::Tensor y;
  json err = catching([&] {
    std::vector<at::Tensor> in;
    for (const auto& i : c.at("inputs")) in.push_back(case_tensor(i, mesh));
    y = run_op(c.at("op").get<std::string>(), c.value("args", json::object()), in);
  });
  const int64_t failed = count_failed(!err.empty(), mesh);
  json out = {{"id", c.at("id")}};
  if (failed > 0) {
    if (err.empty()) err = error_entry("", "");  // filled from a failed rank by main_impl
    err["failed_ranks"] = failed;
    out.update(err);
    return out;
  }
  err = catching([&] {
    const DTensor d = as_dtensor(y);
    json pl = json::array();
    for (const auto& p : d.placements()) pl.push_back(p.to_string());
    const at::Tensor full = d.full_tensor().contiguous();
    out["status"] = "ok";
    out["placements"] = pl;
    out["shape"] = full.sizes().vec();
    const double* v = full.data_ptr<double>();
    out["values"] = std::vector<double>(v, v + full.numel());
  });
  if (!err.empty()) {
    err["message"] = "full_tensor: " + err["message"].get<std::string>();
    out.update(err);
  }
  return out;
}

int main_impl(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: dispatch_cases CASES.json OUT.json [--only ID-SUBSTRING]\n";
    return 2;
  }
  std::string only;
  if (argc >= 5 && std::string(argv[3]) == "--only") only = argv[4];
  std::ifstream f(argv[1]);
  if (!f) throw ValueError(std::string("dispatch_cases: cannot read ") + argv[1]);
  const json spec = json::parse(f);
  // Cases grouped by mesh shape, in file order; one run_on_mesh per mesh.
  std::map<std::vector<int64_t>, std::vector<json>> by_mesh;
  std::vector<std::vector<int64_t>> order;
  for (const auto& c : spec.at("cases")) {
    if (!only.empty() && c.at("id").get<std::string>().find(only) == std::string::npos) continue;
    const std::vector<int64_t> m = ints(c.at("mesh"));
    if (!by_mesh.count(m)) order.push_back(m);
    by_mesh[m].push_back(c);
  }
  json results = json::array();
  std::mutex mu;
  for (const auto& m : order) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<json>& cases = by_mesh[m];
    int64_t world = 1;
    for (int64_t s : m) world *= s;
    // per_rank[r][i]: rank r's entry of case i.
    std::vector<std::vector<json>> per_rank(static_cast<size_t>(world), std::vector<json>(cases.size()));
    comm::testing::run_on_mesh(
        m,
        [&](const DeviceMesh& mesh) {
          for (size_t i = 0; i < cases.size(); ++i) {
            json r = run_case(cases[i], mesh);
            std::lock_guard<std::mutex> lock(mu);
            per_rank[static_cast<size_t>(mesh.get_rank())][i] = std::move(r);
          }
        },
        comm::testing::with_timeouts(std::chrono::seconds(20), std::chrono::seconds(240)));
    for (size_t i = 0; i < cases.size(); ++i) {
      json r = per_rank[0][i];
      // What the case was (the id names it too): op, mesh, inputs' placements and global shapes.
      r["op"] = cases[i].at("op");
      r["mesh"] = cases[i].at("mesh");
      r["inputs"] = json::array();
      for (const auto& in : cases[i].at("inputs"))
        r["inputs"].push_back({{"placements", in.at("placements")}, {"shape", in.at("shape")}});
      if (r.value("status", "") == "error" && r.value("failed_ranks", world) < world) {
        // Failed on some ranks only: the first failed rank's error, naming the ranks.
        std::vector<int64_t> ranks;
        json first;
        for (int64_t k = 0; k < world; ++k)
          if (!per_rank[static_cast<size_t>(k)][i].value("type", std::string()).empty()) {
            ranks.push_back(k);
            if (first.is_null()) first = per_rank[static_cast<size_t>(k)][i];
          }
        r["type"] = first["type"];
        r["message"] = "on rank(s) " + shape_to_string(ranks) + " only: " + first["message"].get<std::string>();
      }
      r.erase("failed_ranks");
      results.push_back(std::move(r));
    }
    std::fprintf(stderr, "dispatch_cases: mesh %s: %zu cases in %.2f s\n", shape_to_string(m).c_str(),
                 cases.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::ofstream o(argv[2]);
  o << json{{"cases", results}}.dump() << "\n";
  if (!o) throw ValueError(std::string("dispatch_cases: cannot write ") + argv[2]);
  return 0;
}

}  // namespace
}  // namespace hyper

int main(int argc, char** argv) {
  try {
    return hyper::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dispatch_cases: " << e.what() << "\n";
    return 1;
  }
}
