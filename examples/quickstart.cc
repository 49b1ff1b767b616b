// quickstart: the README's first program. Every rank builds the same [6, 4] tensor x,
// distributes it by rows, computes sum(x * x) through ordinary at:: ops on the DTensor,
// differentiates it back to x, moves the rows to columns, checkpoints the columns and loads
// them into a replicated tensor. Each value is checked against the single-device computation
// (sum(x * x) = 4900, its gradient 2 * x, x itself); the exit status is 1 when one differs.
//
//   build/tools/hyperrun -n 2 -- build/examples/quickstart [CHECKPOINT_DIR]
//   torchrun --standalone --nproc-per-node 2 --no-python build/examples/quickstart
//
// CHECKPOINT_DIR (default: quickstart_ckpt in the working directory) is written by the save,
// so every rank must be given the same one; an earlier checkpoint there is replaced. The ctest
// entry `quickstart` runs it on 2 ranks (tests/CMakeLists.txt).
#include <ATen/ATen.h>

#include <cstdio>
#include <exception>
#include <string>

#include "hyper/hyper.h"

namespace {

int run(const std::string& dir) {
  bool ok = true;
  int rank = 0;
  auto check = [&](bool good, const char* what) {
    if (!good) std::fprintf(stderr, "quickstart: rank %d: %s differs from one device\n", rank, what);
    ok = ok && good;
  };

  // The lines below are the example in README.md ("A first program"): keep the two alike.
  hyper::World world = hyper::init_process_group();  // from hyperrun's / torchrun's environment
  hyper::DeviceMesh mesh = hyper::init_device_mesh(world, "cpu", {world.size()});
  rank = world.rank();

  // Every rank holds the same x; distribute_tensor keeps this rank's rows of it.
  at::Tensor x = at::arange(1, 25, at::kFloat).reshape({6, 4}).requires_grad_();
  hyper::DTensor dx = hyper::distribute_tensor(x, mesh, {hyper::Shard(0)});

  // A DTensor is an at::Tensor: ordinary ops run on the shards, and autograd reaches x.
  at::Tensor t = hyper::as_tensor(dx);
  at::Tensor loss = (t * t).sum();  // each rank sums its rows: a Partial(sum) scalar
  loss.backward();
  check(loss.item<double>() == 4900.0, "sum(x * x)");  // item() reduces the Partial
  check(at::equal(x.grad(), 2 * x), "the gradient");    // d sum(x * x) / dx = 2x

  // Rows -> columns: one all_to_all of exactly the pieces that change hands.
  hyper::DTensor cols = dx.redistribute(mesh, {hyper::Shard(1)});
  check(at::equal(cols.full_tensor(), x), "the redistributed tensor");

  // Save the column shards; load them into a replicated tensor (resharded on load).
  hyper::dcp::StateDict saved = {{"x", cols}};
  hyper::dcp::save(saved, dir);
  hyper::DTensor back = hyper::distribute_tensor(at::zeros({6, 4}), mesh, {hyper::Replicate()});
  hyper::dcp::StateDict loaded = {{"x", back}};
  hyper::dcp::load(loaded, dir);  // in place: back's local tensor now holds x
  check(at::equal(back.to_local(), x), "the loaded checkpoint");
  // End of the README's example.

  if (!ok) return 1;
  if (rank == 0) std::printf("quickstart: ok (%d ranks)\n", world.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: quickstart [CHECKPOINT_DIR]\n");
    return 2;
  }
  try {
    return run(argc == 2 ? argv[1] : "quickstart_ckpt");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
  }
}
