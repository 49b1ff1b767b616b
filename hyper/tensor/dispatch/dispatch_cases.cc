// dispatch_cases: runs the op/layout catalogue of tests/pytorch_compare/cases.json through
// hyper's DTensor-as-at::Tensor dispatch (dtensor_tensor.h) on threads as ranks and writes, per
// case, the output placements and the full tensor, or the refusal. The same catalogue runs
// through PyTorch DTensor in tests/pytorch_compare/compare_dtensor.py, which compares the two
// (issue 14; docs/dtensor.md "Compared with PyTorch DTensor").
//
//   dispatch_cases CASES.json OUT.json [--only ID-SUBSTRING]
//
// Output: {"cases": [{"id", "op", "mesh", "inputs": [{"placements", "shape"}], and either
// "status": "ok", "placements": ["S(0)", ...], "shape": [...], "values": [flat row-major], or
// "status": "error", "type": "NotImplementedError" | "ValueError" | "c10::Error" |
// "std::exception", "message"}]}. A failure on some ranks only is reported with the first
// failed rank's exception, its message prefixed "on rank(s) [...] only: ".
// Inputs: testing_dispatch.h's global_a / global_b and make (Partial with unequal shares);
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
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using nlohmann::json;

std::vector<int64_t> ints(const json& j) { return j.get<std::vector<int64_t>>(); }

/// The op of a case on at::Tensors (DTensor tensors here). `in` in the order of the case's
/// inputs; ops and argument names as in compare_dtensor.py's OPS.
at::Tensor run_op(const std::string& op, const json& args, const std::vector<at::Tensor>& in) {
  auto arity = [&](size_t n) {
    if (in.size() != n)
      throw ValueError("dispatch_cases: op " + op + " takes " + std::to_string(n) + " inputs, got " +
                       std::to_string(in.size()));
  };
  if (op == "add" || op == "sub" || op == "mul" || op == "div" || op == "add_alpha" ||
      op == "mm" || op == "bmm" || op == "matmul")
    arity(2);
  else if (op == "addmm" || op == "baddbmm")
    arity(3);
  else
    arity(1);
  const at::Tensor& a = in[0];
  if (op == "add") return at::add(a, in[1]);
  if (op == "add_alpha") return at::add(a, in[1], args.at("alpha").get<double>());
  if (op == "sub") return at::sub(a, in[1]);
  if (op == "mul") return at::mul(a, in[1]);
  if (op == "div") return at::div(a, in[1]);
  if (op == "add_scalar") return at::add(a, args.at("scalar").get<double>());
  if (op == "mul_scalar") return at::mul(a, args.at("scalar").get<double>());
  if (op == "div_scalar") return at::div(a, args.at("scalar").get<double>());
  if (op == "neg") return at::neg(a);
  if (op == "relu") return at::relu(a);
  if (op == "exp") return at::exp(a);
  if (op == "tanh") return at::tanh(a);
  if (op == "gelu") return at::gelu(a);
  if (op == "clone") return a.clone();
  if (op == "sum") return at::sum(a);
  if (op == "sum_dim") return at::sum(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "amax") return at::amax(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "amin") return at::amin(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "mm") return at::mm(a, in[1]);
  if (op == "bmm") return at::bmm(a, in[1]);
  if (op == "matmul") return at::matmul(a, in[1]);
  if (op == "addmm")
    return at::addmm(a, in[1], in[2], args.at("beta").get<double>(), args.at("alpha").get<double>());
  if (op == "baddbmm")
    return at::baddbmm(a, in[1], in[2], args.at("beta").get<double>(), args.at("alpha").get<double>());
  if (op == "view") return a.view(ints(args.at("shape")));
  if (op == "reshape") return a.reshape(ints(args.at("shape")));
  if (op == "permute") return a.permute(ints(args.at("dims")));
  if (op == "transpose") return a.transpose(args.at("dim0").get<int64_t>(), args.at("dim1").get<int64_t>());
  if (op == "t") return a.t();
  if (op == "unsqueeze") return a.unsqueeze(args.at("dim").get<int64_t>());
  if (op == "squeeze") return a.squeeze(args.at("dim").get<int64_t>());
  if (op == "squeeze_all") return a.squeeze();
  if (op == "slice")
    return a.slice(args.at("dim").get<int64_t>(), args.at("start").get<int64_t>(),
                   args.at("end").get<int64_t>(), args.at("step").get<int64_t>());
  if (op == "select") return a.select(args.at("dim").get<int64_t>(), args.at("index").get<int64_t>());
  if (op == "expand") return a.expand(ints(args.at("shape")));
  throw ValueError("dispatch_cases: unknown op '" + op + "' in the case file");
}

Placements placements_of(const json& j) {
  Placements ps;
  for (const auto& s : j) ps.push_back(Placement::from_string(s.get<std::string>()));
  return ps;
}

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
    for (const auto& i : c.at("inputs")) {
      const std::vector<int64_t> shape = ints(i.at("shape"));
      const at::Tensor global = i.at("values") == "a" ? dispatch_testing::global_a(shape)
                                                      : dispatch_testing::global_b(shape);
      in.push_back(dispatch_testing::make(global, mesh, placements_of(i.at("placements"))).as_tensor());
    }
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
