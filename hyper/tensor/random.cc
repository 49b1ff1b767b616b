// The RNG tracker of DTensor random ops and the counter-based uniform (see random.h).
#include "hyper/tensor/random.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/mesh_attachment.h"
#include "hyper/core/errors.h"

namespace hyper {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kMul1 = 0xbf58476d1ce4e5b9ULL;
constexpr uint64_t kMul2 = 0x94d049bb133111ebULL;

uint64_t mix(uint64_t z) {
  z ^= z >> 30;
  z *= kMul1;
  z ^= z >> 27;
  z *= kMul2;
  return z ^ (z >> 31);
}

int64_t as_signed(uint64_t v) {
  int64_t s;
  std::memcpy(&s, &v, sizeof s);
  return s;
}
uint64_t as_unsigned(int64_t v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

/// One mesh's tracker on this rank.
struct Tracker {
  std::mutex mu;
  RngState state;
};

std::shared_ptr<Tracker> tracker_of(const DeviceMesh& mesh) {
  HYPER_CHECK_VALUE(mesh.defined(), "hyper RNG tracker: the mesh is undefined");
  const std::string key = std::string("rng/") + c10::DeviceTypeName(mesh.device_type()) + "/" +
                          mesh.topology().to_string();
  return std::static_pointer_cast<Tracker>(
      comm::mesh_attachment(mesh, key, [] { return std::static_pointer_cast<void>(std::make_shared<Tracker>()); }));
}

/// A 1-element int64 tensor on the mesh's device (the mesh group's backend moves it).
at::Tensor word(const DeviceMesh& mesh, uint64_t v) {
  return at::full({1}, as_signed(v), at::TensorOptions().dtype(at::kLong).device(mesh.device_type()));
}

/// z ^= z >> k with a logical shift (torch's >> on int64 is arithmetic: the copied sign bits
/// are cleared), in place.
void xor_shift_(at::Tensor& z, int64_t k) {
  z.bitwise_xor_(at::bitwise_right_shift(z, k).bitwise_and_(
      static_cast<int64_t>((uint64_t{1} << (64 - k)) - 1)));
}

}  // namespace

void manual_seed(const DeviceMesh& mesh, uint64_t seed) {
  const auto t = tracker_of(mesh);
  const comm::Group g = mesh.get_mesh_group();
  const at::Tensor all = comm::all_gather_v(word(mesh, seed), g).cpu();
  std::vector<uint64_t> seeds;
  bool same = true;
  for (int64_t r = 0; r < all.numel(); ++r) {
    seeds.push_back(as_unsigned(all[r].item<int64_t>()));
    same = same && seeds.back() == seeds.front();
  }
  if (!same) {
    std::string list;
    for (size_t r = 0; r < seeds.size(); ++r)
      list += (r ? ", " : "") + std::to_string(seeds[r]);
    throw ValueError(internal::str_cat(
        "hyper::manual_seed: the ranks of ", mesh.to_string(), " passed different seeds [", list,
        "] (in mesh-group order; this rank passed ", seed, "): every rank of the mesh must pass "
        "the same seed, else Replicate regions would draw different masks"));
  }
  std::lock_guard<std::mutex> lock(t->mu);
  t->state = RngState{seed, 0, true};
}

RngState rng_state(const DeviceMesh& mesh) {
  const auto t = tracker_of(mesh);
  std::lock_guard<std::mutex> lock(t->mu);
  return t->state;
}

RngState draw_rng(const DeviceMesh& mesh, int64_t global_numel) {
  HYPER_CHECK_VALUE(global_numel >= 0, "hyper RNG tracker: a draw of ", global_numel,
                    " elements (negative)");
  const auto t = tracker_of(mesh);
  std::lock_guard<std::mutex> lock(t->mu);
  if (!t->state.seeded) {
    const comm::Group g = mesh.get_mesh_group();
    uint64_t mine = 0;
    {
      // current_seed() reads the generator's seed without drawing (its stream is unchanged).
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> glock(gen.mutex());
      mine = gen.current_seed();
    }
    const at::Tensor s = comm::broadcast(word(mesh, mine), 0, g).cpu();
    t->state = RngState{as_unsigned(s[0].item<int64_t>()), 0, true};
  }
  RngState r = t->state;
  t->state.offset += global_numel;
  return r;
}

at::Tensor uniform_at(const at::Tensor& global_index, uint64_t seed, int64_t offset) {
  HYPER_CHECK_VALUE(global_index.scalar_type() == at::kLong,
                    "hyper::uniform_at: the index tensor must be int64, not ",
                    c10::toString(global_index.scalar_type()));
  // torch's int64 + and * wrap mod 2^64 (two's complement): the unsigned formula, bit for bit.
  // In place after the first op: one index-sized temporary besides the result.
  at::Tensor z = global_index + offset;
  z.mul_(as_signed(kGamma)).add_(as_signed(mix(seed)));
  xor_shift_(z, 30);
  z.mul_(as_signed(kMul1));
  xor_shift_(z, 27);
  z.mul_(as_signed(kMul2));
  xor_shift_(z, 31);
  z.bitwise_right_shift_(11).bitwise_and_(static_cast<int64_t>((uint64_t{1} << 53) - 1));  // top 53 bits
  return z.to(at::kDouble).mul_(1.0 / 9007199254740992.0);  // 2^-53
}

at::Tensor global_linear_index(const Layout& layout, int64_t mesh_index,
                               const at::TensorOptions& options) {
  const at::TensorOptions o = options.dtype(at::kLong);
  const Box b = layout.is_ragged() ? layout.ragged_box(mesh_index) : layout.local_box(mesh_index);
  const Shape& shape = layout.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  at::Tensor idx = at::zeros(std::vector<int64_t>(b.sizes.begin(), b.sizes.end()), o);
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    std::vector<int64_t> view(rank, 1);
    view[d] = b.sizes[d];
    idx.add_(at::arange(b.offsets[d], b.offsets[d] + b.sizes[d], o).mul_(stride).view(view));
    stride *= shape[d];
  }
  if (layout.is_ragged()) {  // the rank's interval of its box
    const Interval iv = layout.ragged_interval(mesh_index);
    return idx.view({-1}).narrow(0, iv.start, iv.size()).contiguous();
  }
  return idx;
}

}  // namespace hyper
