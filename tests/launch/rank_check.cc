// rank_check: a minimal hyper program started by a launcher (hyperrun or torchrun). It
// rendezvouses from torchrun's environment, builds a 1-D mesh, runs an uneven
// all_gather_v and checks the result against what it computes locally. Exit 0 on success.

#include <ATen/ATen.h>

#include <cstdio>
#include <exception>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/world.h"

int main() {
  try {
    hyper::ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(60);
    hyper::World world = hyper::init_process_group(options);
    const int rank = world.rank();
    const int n = world.size();
    auto mesh = hyper::init_device_mesh(world, "cpu", {n}, {"dp"});
    // Rank r contributes r rows of value r (rank 0 contributes nothing).
    at::Tensor mine = at::full({rank, 2}, static_cast<float>(rank));
    at::Tensor all = hyper::comm::all_gather_v(mine, mesh.get_group(0));
    std::vector<at::Tensor> expected;
    for (int r = 0; r < n; ++r) expected.push_back(at::full({r, 2}, static_cast<float>(r)));
    if (!at::equal(all, at::cat(expected))) {
      std::fprintf(stderr, "rank %d: all_gather_v result is wrong\n", rank);
      return 1;
    }
    std::printf("rank %d of %d: ok (gathered %lld rows)\n", rank, n,
                static_cast<long long>(all.size(0)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank_check: %s\n", e.what());
    return 1;
  }
}
