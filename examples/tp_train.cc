// tp_train: trains the example transformer block (examples/common/transformer_block.h)
// with tensor parallelism on every rank hyperrun (or torchrun) starts, checks each step's
// loss against the single-device block trained the same way, and checkpoints the sharded
// parameters with hyper::dcp; `--load` resumes such a checkpoint on another number of ranks
// (the checkpoint is resharded on load).
//
//   build/tools/hyperrun -n 4 -- build/examples/tp_train --steps 5 --save /tmp/ckpt
//   build/tools/hyperrun -n 2 -- build/examples/tp_train --load /tmp/ckpt
//
// Two forms of the same block (--model):
//   plain (default): PlainTransformerBlock, built from unmodified torch::nn::Linear and
//     torch::nn::LayerNorm; parallelize_module makes its parameters DTensor tensors and the
//     activations flow between the modules as DTensor tensors (Megatron tensor parallelism,
//     the plan tensor_parallel_plan; issue 14). The batch goes in as a plain tensor (a plain
//     tensor beside DTensors is Replicate) and the loss comes out as a DTensor scalar.
//   hookable: TransformerBlock of hyper::nn modules with sequence parallelism
//     (sequence_parallel_plan) and async relayouts at the module boundaries (--sync: off);
//     activations are local sequence shards.
// A checkpoint saved by one form loads into the other (the parameter names are the same).
//
// Training: plain SGD (no momentum, so the optimizer is stateless and a checkpoint of the
// parameters plus the step counter is the whole training state) on mse(block(x), target)
// for one fixed synthetic batch. Every rank also trains the single-device reference itself
// from the same seed (cheap at this size); rank 0 prints both losses. Exit status 1 when a
// loss differs from the reference's by more than rtol 1e-4, or (with --load) a loaded
// parameter differs from the reference's by more than 1e-6.
#include <ATen/ATen.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "examples/common/transformer_block.h"
#include "hyper/hyper.h"
#include "tools/cli/args.h"

namespace {

using hyper::examples::Batch;
using hyper::examples::PlainTransformerBlock;
using hyper::examples::TransformerBlock;
using hyper::examples::TransformerConfig;

struct Args {
  int steps = 5;
  std::string save_dir;
  std::string load_dir;
  bool async = true;
  bool plain = true;
  double lr = 0.2;
  int64_t batch = 2;
  int64_t seq = 16;
  uint64_t seed = 1;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "tp_train: %s\n"
               "usage: tp_train [--steps N] [--save DIR] | --load DIR   [--model plain|hookable]\n"
               "                [--sync] [--lr X] [--batch B] [--seq S] [--seed K]\n",
               msg);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  hyper::cli::ArgParser p({"unknown argument {arg}", "missing value after {arg}"});
  p.option({"--steps"}, [&](const std::string& v) { a.steps = std::stoi(v); });
  p.option({"--save"}, [&](const std::string& v) { a.save_dir = v; });
  p.option({"--load"}, [&](const std::string& v) { a.load_dir = v; });
  p.flag({"--sync"}, [&] { a.async = false; });
  p.option({"--model"}, [&](const std::string& v) {
    if (v != "plain" && v != "hookable")
      throw hyper::cli::UsageError("--model must be plain or hookable, got '" + v + "'");
    a.plain = v == "plain";
  });
  p.option({"--lr"}, [&](const std::string& v) { a.lr = std::stod(v); });
  p.option({"--batch"}, [&](const std::string& v) { a.batch = std::stoll(v); });
  p.option({"--seq"}, [&](const std::string& v) { a.seq = std::stoll(v); });
  p.option({"--seed"}, [&](const std::string& v) { a.seed = std::stoull(v); });
  p.help({"-h", "--help"});
  try {
    p.parse(argc, argv);
  } catch (const hyper::cli::UsageError& e) {
    usage(e.what());
  }
  if (p.help_requested()) usage("help");
  if (!a.save_dir.empty() && !a.load_dir.empty()) usage("--save and --load are exclusive");
  if (a.steps < 0) usage("--steps must be >= 0");
  return a;
}

TransformerConfig config() {
  TransformerConfig cfg;
  cfg.hidden = 64;
  cfg.n_heads = 4;
  cfg.head_dim = 16;
  cfg.ffn = 256;
  return cfg;
}

/// The single-device block trained `steps` SGD steps; returns the losses (one per step).
template <class Block>
std::vector<double> train_reference(Block& ref, const Batch& batch, int steps, double lr) {
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(lr));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    at::Tensor loss = hyper::examples::mse_loss(ref->forward(batch.x), batch.target);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-4 * std::abs(b) + 1e-7; }

/// The block form's differences: the plain torch::nn block takes the whole batch (a plain
/// tensor, Replicate) and returns a DTensor tensor; the hookable block takes and returns the
/// rank's sequence shard.
template <class Block>
struct Form;
template <>
struct Form<PlainTransformerBlock> {
  static constexpr const char* kName = "plain torch::nn block, tensor-parallel plan";
  static void parallelize(PlainTransformerBlock& block, const hyper::DeviceMesh& mesh, bool) {
    hyper::examples::parallelize_plain_block(block, mesh);
  }
  /// The step's loss on every rank (the DTensor scalar's value) after backward().
  static double loss_step(PlainTransformerBlock& block, const Batch& batch,
                          const hyper::DeviceMesh&) {
    at::Tensor loss = hyper::examples::mse_loss(block->forward(batch.x), batch.target);
    loss.backward();
    return hyper::as_dtensor(loss).full_tensor().item<double>();
  }
};
template <>
struct Form<TransformerBlock> {
  static constexpr const char* kName = "hookable hyper::nn block, sequence-parallel plan";
  static void parallelize(TransformerBlock& block, const hyper::DeviceMesh& mesh, bool async) {
    hyper::tp::parallelize_module(
        block.ptr(), mesh,
        hyper::examples::sequence_parallel_plan(block->cfg, mesh.size(0), async));
  }
  static double loss_step(TransformerBlock& block, const Batch& batch,
                          const hyper::DeviceMesh& mesh) {
    const at::Tensor x_local = hyper::examples::shard_sequence(batch.x, mesh);
    const at::Tensor t_local = hyper::examples::shard_sequence(batch.target, mesh);
    at::Tensor part = hyper::examples::sp_mse_loss(block->forward(x_local), t_local,
                                                   batch.target.numel());
    part.backward();
    return hyper::examples::sum_over_mesh(part, mesh);
  }
};

template <class Block>
int train(const Args& args, const hyper::DeviceMesh& mesh) {
  const int rank = mesh.get_rank();
  const int n = static_cast<int>(mesh.size(0));
  const TransformerConfig cfg = config();
  const Batch batch = hyper::examples::make_batch(cfg, args.batch, args.seq, args.seed + 100);
  const bool loading = !args.load_dir.empty();

  // The parallelized block. When loading, start from other parameters (seed + 1) so that
  // the checks below prove the checkpoint was read.
  Block ref = hyper::examples::make_block<Block>(cfg, args.seed);
  Block block = loading ? hyper::examples::make_block<Block>(cfg, args.seed + 1)
                        : hyper::examples::copy_block(*ref);
  Form<Block>::parallelize(block, mesh, args.async);
  if (rank == 0) {
    std::printf("tp_train: %d ranks, %s, block %s, batch %lld x seq %lld, SGD lr %g%s%s\n", n,
                Form<Block>::kName, cfg.to_string().c_str(), static_cast<long long>(args.batch),
                static_cast<long long>(args.seq), args.lr,
                args.plain ? "" : (args.async ? ", async on" : ", async off"),
                loading ? (", resuming " + args.load_dir).c_str() : "");
  }

  int64_t start_step = 0;
  bool ok = true;
  if (loading) {
    hyper::dcp::StateDict sd = hyper::tp::state_dict(*block);
    sd["step"] = int64_t{0};
    hyper::dcp::load(sd, args.load_dir);
    start_step = std::get<int64_t>(sd.at("step"));
    // The reference after the same number of steps.
    train_reference(ref, batch, static_cast<int>(start_step), args.lr);
    const auto mism = hyper::examples::compare_parameters(*block, *ref, mesh, 0.0, 1e-6);
    if (!mism.empty()) {
      std::fprintf(stderr, "rank %d: loaded parameters differ from the reference after %lld "
                   "steps:\n%s", rank, static_cast<long long>(start_step),
                   hyper::examples::describe(mism).c_str());
      ok = false;
    } else if (rank == 0) {
      std::printf("loaded step %lld: all %zu parameters equal the single-device reference "
                  "(|diff| <= 1e-6)\n",
                  static_cast<long long>(start_step), block->parameters().size());
    }
  }

  // Steps: `--steps` when training from scratch, one more after a load.
  const int steps = loading ? 1 : args.steps;
  torch::optim::SGD opt(block->parameters(), torch::optim::SGDOptions(args.lr));
  torch::optim::SGD opt_ref(ref->parameters(), torch::optim::SGDOptions(args.lr));
  for (int s = 0; s < steps; ++s) {
    const int64_t step = start_step + s + 1;
    opt.zero_grad();
    const double loss = Form<Block>::loss_step(block, batch, mesh);
    opt.step();

    opt_ref.zero_grad();
    at::Tensor ref_loss_t = hyper::examples::mse_loss(ref->forward(batch.x), batch.target);
    ref_loss_t.backward();
    opt_ref.step();
    const double ref_loss = ref_loss_t.item<double>();

    const bool step_ok = close(loss, ref_loss);
    ok = ok && step_ok;
    if (rank == 0) {
      std::printf("step %lld  loss %.7f  single-device %.7f  rel diff %.2e  %s\n",
                  static_cast<long long>(step), loss, ref_loss,
                  std::abs(loss - ref_loss) / std::abs(ref_loss), step_ok ? "ok" : "MISMATCH");
    }
  }
  {
    const auto mism = hyper::examples::compare_parameters(*block, *ref, mesh, 0.0, 1e-6);
    if (!mism.empty()) {
      std::fprintf(stderr, "rank %d: parameters differ from the reference after training:\n%s",
                   rank, hyper::examples::describe(mism).c_str());
      ok = false;
    }
  }

  if (!args.save_dir.empty()) {
    hyper::dcp::StateDict sd = hyper::tp::state_dict(*block);
    sd["step"] = start_step + steps;
    hyper::dcp::save(sd, args.save_dir);
    if (rank == 0) {
      std::printf("saved %zu parameters and step %lld to %s\n", sd.size() - 1,
                  static_cast<long long>(start_step + steps), args.save_dir.c_str());
    }
  }
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED (loss or parameters differ from the single-device "
                 "reference)\n", rank);
    return 1;
  }
  if (rank == 0) std::printf("tp_train: ok\n");
  return 0;
}

int run(const Args& args) {
  torch::set_num_threads(1);
  hyper::ProcessGroupOptions pg;
  pg.timeout = std::chrono::seconds(120);
  hyper::World world = hyper::init_process_group(pg);
  const auto mesh = hyper::init_device_mesh(world, "cpu", {world.size()}, {"tp"});
  return args.plain ? train<PlainTransformerBlock>(args, mesh) : train<TransformerBlock>(args, mesh);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_train: %s\n", e.what());
    return 1;
  }
}
