// DispatchCatalogue.*: an OpInfo-style test. Every case of the op/layout catalogue
// tests/pytorch_compare/cases.json (the one the PyTorch comparison runs; 1-D and 2-D meshes,
// even and uneven Shard, Replicate, Partial(sum/avg/max/min), RaggedShard) runs on threads as
// ranks (one run_on_mesh per mesh shape) with the inputs as DTensor tensors that require grad:
// - values: the output's full_tensor() equals the op on the global tensors on one device;
// - gradients: backward of (y * W).sum(), W a fixed tensor of y's shape with a different weight
//   per element, gives each input a grad whose full_tensor() equals the single-device grad;
// - a refusal is a NotImplementedError or ValueError on every rank whose message names the
//   aten:: op and the inputs' placements, and it must be listed in kRefused below (the list is
//   asserted both ways: a listed case that starts working fails too, so the list is updated).
// Each check is one EXPECT naming the case id.
//
// Adding an op (one line per op): its ATen call in tests/pytorch_compare/ops.json (the table
// run_op here and compare_dtensor.py both read), its layout cases in
// tests/pytorch_compare/make_cases.py (then `python3 tests/pytorch_compare/make_cases.py`), and,
// for what it refuses on purpose, a line in kRefused.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
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
using dispatch_testing::case_global;
using dispatch_testing::case_tensor;
using dispatch_testing::ints;
using dispatch_testing::make;
using dispatch_testing::run_op;

/// Where a case stops: the op itself, the full_tensor() of its output, the backward, or the
/// full_tensor() of a gradient.
enum class Stage { kOp, kFullTensor, kBackward, kGradFullTensor };
const char* stage_name(Stage s) {
  switch (s) {
    case Stage::kOp: return "the op";
    case Stage::kFullTensor: return "full_tensor() of the output";
    case Stage::kBackward: return "the backward";
    case Stage::kGradFullTensor: return "full_tensor() of an input's grad";
  }
  return "?";
}

/// What hyper refuses on purpose (not yet, or fail-closed): a regex over the case id, the stage
/// that is refused (the stages before it must pass and are checked), a text the message must
/// contain, and why. A case is refused iff it matches an entry (the first match is used).
struct Refused {
  const char* id_regex;
  Stage stage;
  const char* message;
  const char* why;
};
const std::vector<Refused>& refused_list() {
  static const std::vector<Refused> kRefused = {
      // Fail-closed refusals of the op itself (docs/dtensor.md, rules table).
      {R"(^m\S+ squeeze \[S\(1\)\]\d+x1x\d+$)", Stage::kOp, "squeeze of the sharded size-1 dim 1 is not implemented",
       "squeezing a sharded size-1 dim would need a redistribution first"},
      // The nn rules (docs/dtensor.md's rules table, "Not yet").
      {R"(^m\S+ embedding \S+ \[P\(sum\)\]2x3$)", Stage::kOp, "Partial indices",
       "a sum of ids is not an id"},
      // An in-place op that is not linear cannot keep a Partial self (every coordinate would
      // apply it to its share); redistributing self in place is not done silently.
      {R"(^m\S+ sin_inplace \[P\(sum\))", Stage::kOp, "in-place op would change argument 0's P(sum)",
       "sin_ of a Partial self"},
      // RaggedShard (fail-closed, docs/dtensor.md): only elementwise ops (beside any layout:
      // the other operands are moved onto the ragged one) and the full sum compute; every
      // other op is refused.
      {R"(^m\S+ (sum_dim|amax)\(.*\[RS\()", Stage::kOp, "a RaggedShard DTensor reduces only over all dims",
       "a reduction over some dims of a ragged tensor"},
      {R"(^m\S+ (view|transpose|unsqueeze|slice|select)\S* \[RS\()", Stage::kOp,
       "view ops of a RaggedShard DTensor are not implemented", "views of a ragged tensor"},
      {R"(^m\S+ max_dim\(.*\[RS\()", Stage::kOp, "not implemented for a RaggedShard DTensor",
       "max / min along a dim of a ragged tensor (maxdim_kernels.h)"},
      {R"(^m\S+ mm \[RS\()", Stage::kOp, "RaggedShard operands of a matmul are not implemented",
       "matmul of a ragged tensor"},
      {R"(^m\S+ (split|unbind)\S* \[RS\()", Stage::kOp,
       "split / chunk / unbind of a RaggedShard DTensor is not implemented", "pieces of a ragged tensor"},
  };
  return kRefused;
}

/// Deliberate faults for DispatchCatalogue.SelfCheckEveryCheckCanFail (all off otherwise).
struct Perturbation {
  double value_shift = 0.0;           ///< added to the output's full tensor before the comparison
  double loss_scale = 1.0;            ///< hyper's loss scaled: wrong gradients
  bool ignore_refused_list = false;   ///< as if kRefused were empty
  const Refused* force_listed = nullptr;  ///< as if every case matched this entry
};
Perturbation& perturbation() {
  static Perturbation p;
  return p;
}

const Refused* refused_entry(const std::string& id) {
  if (perturbation().force_listed != nullptr) return perturbation().force_listed;
  if (perturbation().ignore_refused_list) return nullptr;
  static const std::vector<std::regex> patterns = [] {
    std::vector<std::regex> v;
    for (const Refused& r : refused_list()) v.emplace_back(r.id_regex);
    return v;
  }();
  for (size_t i = 0; i < patterns.size(); ++i)
    if (std::regex_search(id, patterns[i])) return &refused_list()[i];
  return nullptr;
}

json load_catalogue(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ValueError("DispatchCatalogue: cannot read " + path);
  return json::parse(f);
}

const json& catalogue() {
  static const json spec =
      load_catalogue(std::string(HYPER_SOURCE_DIR) + "/tests/pytorch_compare/cases.json");
  return spec;
}

/// The weights of the loss (y * W).sum(): a different weight per element of y.
at::Tensor weights(at::IntArrayRef sizes) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  return (at::arange(n, at::kDouble) * 0.125 + 0.75).reshape(sizes);
}

/// How many ranks pass a true `failed` (a collective of all ranks of `mesh`).
int64_t count_failed(bool failed, const DeviceMesh& mesh) {
  const Placements all_partial(static_cast<size_t>(mesh.ndim()), Partial());
  const DTensor d = DTensor::from_local_with_layout(at::full({1}, failed ? 1.0 : 0.0, at::kDouble), mesh,
                                                    Layout(mesh.topology(), all_partial, {1}));
  return static_cast<int64_t>(d.full_tensor().item<double>() + 0.5);
}

/// Runs f; "" when it returns, else "<type>: <message>".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const NotImplementedError& e) {
    return std::string("NotImplementedError: ") + e.what();
  } catch (const ValueError& e) {
    return std::string("ValueError: ") + e.what();
  } catch (const c10::Error& e) {
    return std::string("c10::Error: ") + e.what_without_backtrace();
  } catch (const std::exception& e) {
    return std::string("std::exception: ") + e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The checks of a refusal on this rank: its type, the op and (for the op itself) the
/// inputs' placements named; on rank 0 also that it is listed in kRefused, with its text.
void check_refusal(const json& c, const std::string& err, const Refused* listed, Stage stage, bool report) {
  const std::string id = c.at("id").get<std::string>();
  EXPECT_TRUE(err.rfind("NotImplementedError: ", 0) == 0 || err.rfind("ValueError: ", 0) == 0)
      << id << ": refused with another exception type: " << err;
  if (stage == Stage::kOp || stage == Stage::kBackward) {  // full_tensor() is no aten:: op
    EXPECT_TRUE(contains(err, "aten::")) << id << ": the refusal does not name the aten:: op: " << err;
  }
  if (stage == Stage::kOp)
    for (const auto& in : c.at("inputs")) {
      if (in.value("plain", false)) continue;  // a plain tensor has no placements to name
      std::string pl = "placements=[";
      for (size_t k = 0; k < in.at("placements").size(); ++k)
        pl += (k ? "," : "") + in.at("placements")[k].get<std::string>();
      EXPECT_TRUE(contains(err, pl + "]")) << id << ": the refusal does not name the layout " << pl << "]: " << err;
    }
  if (!report) return;  // the listing is checked once, by rank 0
  if (listed == nullptr || listed->stage != stage) {
    ADD_FAILURE() << id << ": " << stage_name(stage) << " is refused but not listed so in "
                  << "kRefused (catalogue_test.cc): " << err;
  } else {
    EXPECT_TRUE(contains(err, listed->message))
        << id << ": refused, but the message lacks '" << listed->message << "': " << err;
  }
}

/// One case on this rank. Every rank runs the same collectives in the same order: refusals
/// are agreed on (count_failed) before any full_tensor.
void run_case(const json& c, const DeviceMesh& mesh) {
  const std::string id = c.at("id").get<std::string>();
  const std::string op = c.at("op").get<std::string>();
  const json args = c.value("args", json::object());
  const bool report = mesh.get_rank() == 0;  // values and grads are global: rank 0 reports them
  const int64_t world = mesh.size();
  const Refused* listed = refused_entry(id);

  // The oracle: the op and the loss's gradients on the global tensors, one device.
  std::vector<at::Tensor> globals;
  // Only floating inputs require grad (int64 ids, a bool mask do not).
  auto grad_if_floating = [](at::Tensor t) { return at::isFloatingType(t.scalar_type()) ? t.requires_grad_() : t; };
  for (const auto& in : c.at("inputs")) globals.push_back(grad_if_floating(case_global(in).clone()));
  const at::Tensor want = run_op(op, args, globals);
  const at::Tensor w = weights(want.sizes());
  (want * w).sum().backward();

  // hyper.
  std::vector<at::Tensor> xs;
  at::Tensor y;
  const std::string err = error_of([&] {
    for (const auto& in : c.at("inputs")) xs.push_back(grad_if_floating(case_tensor(in, mesh)));
    y = run_op(op, args, xs);
  });
  const int64_t failed = count_failed(!err.empty(), mesh);
  if (failed > 0) {
    if (report) {
      EXPECT_EQ(failed, world) << id << ": refused on " << failed << " of " << world << " ranks only";
    }
    if (!err.empty()) check_refusal(c, err, listed, Stage::kOp, report);
    return;
  }
  // A listed refusal of a stage that passes: the list is stale.
  auto passed = [&](Stage stage) {
    if (report && listed != nullptr && listed->stage == stage)
      ADD_FAILURE() << id << ": listed in kRefused as " << stage_name(stage) << " refused (" << listed->why
                    << ") but it passes now: drop it from the list";
  };
  passed(Stage::kOp);
  at::Tensor got;
  const std::string ferr = error_of([&] { got = as_dtensor(y).full_tensor(); });
  const int64_t ffailed = count_failed(!ferr.empty(), mesh);
  if (ffailed > 0) {
    if (report) {
      EXPECT_EQ(ffailed, world) << id << ": full_tensor() refused on " << ffailed << " of " << world << " ranks only";
    }
    if (!ferr.empty()) check_refusal(c, ferr, listed, Stage::kFullTensor, report);
    return;
  }
  passed(Stage::kFullTensor);
  got = got + perturbation().value_shift;
  if (report) {
    EXPECT_EQ(got.sizes(), want.sizes()) << id << ": output shape";
    if (got.sizes() == want.sizes()) {
      EXPECT_TRUE(at::allclose(got, want.detach(), 1e-7, 1e-9)) << id << ": values\ngot\n" << got << "\nwant\n" << want;
    }
  }

  // Gradients: W with y's placements, Partial made Replicate (RaggedShard kept: the same layout).
  Placements wp = as_dtensor(y).placements();
  for (auto& p : wp)
    if (p.is_partial()) p = Replicate();
  const std::string berr = error_of([&] {
    const at::Tensor wt = make(w, mesh, wp).as_tensor();
    at::Tensor loss = (y * wt).sum();
    if (perturbation().loss_scale != 1.0) loss = loss * perturbation().loss_scale;
    loss.backward();
  });
  const int64_t bfailed = count_failed(!berr.empty(), mesh);
  if (bfailed > 0) {
    if (report) {
      EXPECT_EQ(bfailed, world) << id << ": backward refused on " << bfailed << " of " << world << " ranks only";
    }
    if (!berr.empty()) check_refusal(c, berr, listed, Stage::kBackward, report);
    return;
  }
  passed(Stage::kBackward);
  bool grads_gathered = true;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!globals[k].requires_grad()) continue;  // no gradient on either side
    const at::Tensor g = xs[k].grad();
    const bool ok = g.defined() && is_dtensor(g);
    if (count_failed(!ok, mesh) > 0) {
      if (report) ADD_FAILURE() << id << ": input " << k << " has no DTensor grad";
      continue;
    }
    at::Tensor gf;
    const std::string gerr = error_of([&] { gf = as_dtensor(g).full_tensor(); });
    const int64_t gfailed = count_failed(!gerr.empty(), mesh);
    if (gfailed > 0) {
      grads_gathered = false;
      if (report) {
        EXPECT_EQ(gfailed, world) << id << ": full_tensor() of grad " << k << " refused on " << gfailed
                                  << " of " << world << " ranks only";
      }
      if (!gerr.empty()) check_refusal(c, gerr, listed, Stage::kGradFullTensor, report);
      continue;
    }
    const at::Tensor gw = globals[k].grad();
    if (report) {
      EXPECT_EQ(gf.sizes(), gw.sizes()) << id << ": grad of input " << k << " shape";
      if (gf.sizes() == gw.sizes()) {
        EXPECT_TRUE(at::allclose(gf, gw, 1e-7, 1e-9))
            << id << ": grad of input " << k << "\ngot\n" << gf << "\nwant\n" << gw;
      }
    }
  }
  if (grads_gathered) passed(Stage::kGradFullTensor);
}

/// Every case on `mesh_shape` (only the case `only_id` when given).
void run_catalogue(const std::vector<int64_t>& mesh_shape, const std::string& only_id = "") {
  std::vector<json> cases;
  for (const auto& c : catalogue().at("cases"))
    if (ints(c.at("mesh")) == mesh_shape && (only_id.empty() || c.at("id") == only_id)) cases.push_back(c);
  ASSERT_FALSE(cases.empty()) << "no case on mesh " << shape_to_string(mesh_shape);
  const auto t0 = std::chrono::steady_clock::now();
  comm::testing::run_on_mesh(
      mesh_shape,
      [&](const DeviceMesh& mesh) {
        for (const json& c : cases) run_case(c, mesh);
      },
      comm::testing::with_timeouts(std::chrono::seconds(20), std::chrono::seconds(240)));
  std::printf("DispatchCatalogue: mesh %s: %zu cases in %.2f s\n", shape_to_string(mesh_shape).c_str(),
              cases.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(DispatchCatalogue, Mesh2) { run_catalogue({2}); }
TEST(DispatchCatalogue, Mesh4) { run_catalogue({4}); }
TEST(DispatchCatalogue, Mesh2x2) { run_catalogue({2, 2}); }

// The catalogue has only the meshes above, and every kRefused entry matches some case (a
// stale entry would hide nothing and mislead).
TEST(DispatchCatalogue, EveryMeshIsRunAndEveryListedRefusalMatchesACase) {
  for (const auto& c : catalogue().at("cases")) {
    const auto m = ints(c.at("mesh"));
    const bool run = m == std::vector<int64_t>{2} || m == std::vector<int64_t>{4} || m == std::vector<int64_t>{2, 2};
    EXPECT_TRUE(run)
        << c.at("id") << ": mesh not run by a DispatchCatalogue test";
  }
  for (const Refused& r : refused_list()) {
    bool any = false;
    for (const auto& c : catalogue().at("cases"))
      any = any || std::regex_search(c.at("id").get<std::string>(), std::regex(r.id_regex));
    EXPECT_TRUE(any) << "kRefused entry '" << r.id_regex << "' matches no case";
  }
}

// The checks can fail: each deliberate fault gives exactly one failure, naming the case.
void run_m2_mul() { run_catalogue({2}, "m2 mul [S(0)]4x6 [R]4x6"); }
void run_m2_neg() { run_catalogue({2}, "m2 neg [S(0)]4x6"); }
void run_m2_squeeze() { run_catalogue({2}, "m2 squeeze [S(1)]4x1x6"); }
void run_m2_ragged_neg() { run_catalogue({2}, "m2 neg [RS((0,), (1, 2))]6x4"); }
void run_m2_norm_partial() { run_catalogue({2}, "m2 linalg_vector_norm(2) [P(sum)]4x6"); }
const Refused kFakeOpRefusal = {"", Stage::kOp, "", "self-check"};

TEST(DispatchCatalogue, SelfCheckEveryCheckCanFail) {
  perturbation() = Perturbation();
  perturbation().value_shift = 1e-3;
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(run_m2_mul(), "m2 mul [S(0)]4x6 [R]4x6: values");
  perturbation() = Perturbation();
  perturbation().loss_scale = 1.001;
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(run_m2_neg(), "m2 neg [S(0)]4x6: grad of input 0");
  perturbation() = Perturbation();
  perturbation().ignore_refused_list = true;
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(run_m2_squeeze(),
                                         "m2 squeeze [S(1)]4x1x6: the op is refused but not listed so in kRefused");
  // (No case is refused at the backward stage; a backward refusal goes through the same
  // check_refusal as the op's, exercised just above.)
  perturbation() = Perturbation();
  perturbation().force_listed = &kFakeOpRefusal;
  EXPECT_NONFATAL_FAILURE_ON_ALL_THREADS(run_m2_mul(),
                                         "m2 mul [S(0)]4x6 [R]4x6: listed in kRefused as the op refused (self-check) "
                                         "but it passes now");
  perturbation() = Perturbation();
  // Unperturbed, the same cases pass.
  run_m2_mul();
  run_m2_neg();
  run_m2_squeeze();
  run_m2_ragged_neg();
  run_m2_norm_partial();
}

// Inputs beyond "a"/"b": a bool mask, int64 ids (their count checked), a plain tensor; unknown
// values are a ValueError naming them.
TEST(DispatchCatalogue, CaseInputValuesMaskIdsPlainAndBadOnes) {
  const at::Tensor m = case_global(json::parse(R"({"shape": [2, 3], "placements": ["R"], "values": "mask"})"));
  EXPECT_TRUE(at::equal(m, dispatch_testing::global_a({2, 3}) > 0));
  EXPECT_EQ(m.scalar_type(), at::kBool);
  const at::Tensor ids = case_global(json::parse(R"({"shape": [2], "placements": ["R"], "values": [7, 0]})"));
  EXPECT_EQ(ids.scalar_type(), at::kLong);
  EXPECT_EQ(ids[0].item<int64_t>(), 7);
  EXPECT_EQ(ids[1].item<int64_t>(), 0);
  auto value_error = [](const char* input) {
    try {
      (void)case_global(json::parse(input));
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("<no ValueError>");
  };
  EXPECT_EQ(value_error(R"({"shape": [2, 2], "placements": ["R"], "values": [1, 2, 3]})"),
            "dispatch_cases: 3 int values for an input of 4 elements");
  EXPECT_EQ(value_error(R"({"shape": [2], "placements": ["R"], "values": "c"})"),
            "dispatch_cases: unknown input values \"c\"");
  comm::testing::run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor plain = case_tensor(
        json::parse(R"({"shape": [2, 3], "placements": [], "values": "a", "plain": true})"), mesh);
    EXPECT_FALSE(is_dtensor(plain));
    EXPECT_TRUE(at::equal(plain, dispatch_testing::global_a({2, 3})));
    const at::Tensor d = case_tensor(json::parse(R"j({"shape": [2, 3], "placements": ["S(1)"], "values": "b"})j"), mesh);
    EXPECT_TRUE(at::equal(as_dtensor(d).full_tensor(), dispatch_testing::global_b({2, 3})));
  });
}

// The op table's term language (ops.json's "comment"), evaluated on plain tensors against the
// ATen call it names; every malformed term is a ValueError naming the op and what is wrong.
TEST(DispatchCatalogue, OpTableTermsAndTheirErrors) {
  using dispatch_testing::OpTerm;
  const at::Tensor a = dispatch_testing::global_a({2, 3}), b = dispatch_testing::global_b({2, 3});
  const std::vector<at::Tensor> in = {a, b};
  const json args = json::parse(R"({"dim": [1], "keepdim": true, "alpha": 2, "ord": "inf",
                                    "reduction": "sum", "index": 1, "d": 1})");
  auto run = [&](const char* term) { return OpTerm("t", args, in).run(json::parse(term)); };
  EXPECT_TRUE(at::equal(run(R"({"call": "add.Tensor", "args": ["$0", "$1"], "kwargs": {"alpha": "@alpha"}})"),
                        at::add(a, b, 2)));
  EXPECT_TRUE(at::equal(run(R"({"call": "sum.dim_IntList", "args": ["$0", "@dim", "@keepdim"]})"),
                        at::sum(a, {1}, true)));
  EXPECT_TRUE(at::equal(run(R"({"call": "linalg_vector_norm.default", "args": ["$0", {"float": "@ord"}]})"),
                        at::linalg_vector_norm(a, INFINITY)));
  EXPECT_TRUE(at::equal(run(R"({"call": "mse_loss.default",
                                "args": ["$0", "$1", {"enum": "@reduction", "of": ["none", "mean", "sum"]}]})"),
                        at::mse_loss(a, b, at::Reduction::Sum)));
  const auto [v, i] = at::max(a, 1);
  EXPECT_TRUE(at::equal(run(R"({"call": "max.dim", "args": ["$0", 1], "output": "sum"})"), v + i));
  EXPECT_TRUE(at::equal(run(R"({"call": "max.dim", "args": ["$0", 1], "output": 1})"), i));
  EXPECT_TRUE(at::equal(run(R"({"call": "unbind.int", "args": ["$0", 1], "output": "@index"})"), a.select(1, 1)));
  const at::Tensor half = run(R"({"call": "to.dtype", "args": ["$0", {"dtype": "float32"}]})");
  EXPECT_EQ(half.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(run(R"({"call": "index.Tensor", "args": ["$0", {"index_at": "@d", "index":
                                {"call": "argmax.default", "args": ["$1", 1, true]}}]})"),
                        a.index({at::indexing::Slice(), at::argmax(b, 1, true)})));
  auto error = [&](const char* term) {
    try {
      (void)run(term);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("<no ValueError>");
  };
  const std::string at = "dispatch_cases: op t: ";
  EXPECT_EQ(error(R"({"call": "no_such_op.default", "args": ["$0"]})"), at + "no ATen operator no_such_op.default");
  EXPECT_EQ(error(R"({"call": "neg.default", "args": ["$0", 1]})"), at + "neg.default takes 1 arguments, the table gives 2");
  EXPECT_EQ(error(R"({"call": "add.Tensor", "args": ["$0"]})"), at + "add.Tensor: no value for its argument other");
  EXPECT_EQ(error(R"({"call": "neg.default", "args": ["$0"], "kwargs": {"beta": 1}})"),
            at + "neg.default: unknown keyword among {\"beta\":1}");
  EXPECT_EQ(error(R"({"call": "sum.dim_IntList", "args": ["$0", "@nope"]})"), at + "the case has no argument 'nope'");
  EXPECT_EQ(error(R"({"call": "sum.dim_IntList", "args": ["$0", "x"]})"), at + "cannot pass \"x\" as int[]");
  EXPECT_EQ(error(R"({"call": "max.dim", "args": ["$0", 1], "output": 2})"), at + "output 2 of 2");
  EXPECT_EQ(error(R"({"call": "max.dim", "args": ["$0", 1]})"), at + "max.dim returns 2 values");
  EXPECT_EQ(error(R"({"call": "to.dtype", "args": ["$0", {"dtype": "int3"}]})"), at + "unknown dtype int3");
  EXPECT_EQ(error(R"({"call": "pow.Tensor_Scalar", "args": ["$0", {"float": "many"}]})"), at + "not a float: \"many\"");
  EXPECT_EQ(error(R"({"call": "mse_loss.default", "args": ["$0", "$1", {"enum": "@reduction", "of": ["none"]}]})"),
            at + "\"sum\" is not one of [\"none\"]");
  EXPECT_EQ(error(R"({"what": 1})"), at + "unknown term {\"what\":1}");
  EXPECT_EQ(error(R"({"call": "unbind.int", "args": ["$0", 1]})"), at + "the op's value is not a tensor");
  // The table's own entries name inputs consistently with run_op's count check.
  EXPECT_EQ(dispatch_testing::inputs_named(dispatch_testing::op_table().at("index_put2")), 4u);
  EXPECT_EQ(dispatch_testing::inputs_named(dispatch_testing::op_table().at("polygamma")), 1u);
}

TEST(DispatchCatalogue, UnreadableCatalogueIsAValueErrorNamingThePath) {
  try {
    (void)load_catalogue("/no/such/cases.json");
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "DispatchCatalogue: cannot read /no/such/cases.json");
  }
}

}  // namespace
}  // namespace hyper
