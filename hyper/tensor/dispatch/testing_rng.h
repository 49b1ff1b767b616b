#pragma once
/// \file dispatch/testing_rng.h
/// The test oracle of the RNG tracker's draws (hyper/tensor/random.h): the documented
/// counter-based uniform, written out on uint64_t with a plain loop (not the library's int64
/// torch ops), for dropout_test.cc and random_test.cc.
#include <cstdint>

namespace hyper::dispatch_testing {

/// splitmix64's finalizer.
inline uint64_t rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
/// u(seed, n) in [0, 1): the top 53 bits of mix(mix(seed) + n * golden gamma).
inline double rng_u(uint64_t seed, uint64_t n) {
  return static_cast<double>(rng_mix(rng_mix(seed) + n * 0x9e3779b97f4a7c15ULL) >> 11) * 0x1p-53;
}

}  // namespace hyper::dispatch_testing
