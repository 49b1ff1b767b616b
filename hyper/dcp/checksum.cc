#include "hyper/dcp/checksum.h"

// Header-only xxHash: no -lxxhash for consumers of the static library.
//
// Speed: compiled for the baseline x86-64 target, XXH3 uses SSE2 (about memcpy speed here),
// which made a verified load cost twice a plain read. As libxxhash's own x86 dispatcher does
// (xxh_x86dispatch.c, not shipped in Debian's headers), we also compile the long-input loop
// with AVX2 (target attribute, the same algorithm and result) and pick it at run time when
// the CPU and OS support AVX2. Only for xxHash 0.8.0/0.8.1, whose internal loop signature we
// use; other versions get the portable path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#define HYPER_XXH3_AVX2_CANDIDATE 1
#include <immintrin.h>  // the AVX2 intrinsics (declared for any target, used under the attribute)
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(HYPER_XXH3_AVX2_CANDIDATE) && XXH_VERSION_NUMBER >= 800 && XXH_VERSION_NUMBER < 802
#define HYPER_XXH3_AVX2 1
#endif

#include "hyper/core/errors.h"

namespace hyper::dcp {

namespace {
#ifdef HYPER_XXH3_AVX2
XXH_TARGET_AVX2 uint64_t xxh3_long_avx2(const void* data, size_t n) {
  return XXH3_hashLong_64b_internal(data, n, XXH3_kSecret, sizeof(XXH3_kSecret),
                                    XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}
XXH_TARGET_AVX2 void xxh3_update_avx2(XXH3_state_t* state, const void* data, size_t n) {
  (void)XXH3_update(state, static_cast<const xxh_u8*>(data), n, XXH3_accumulate_512_avx2,
                    XXH3_scrambleAcc_avx2);
}
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif
}  // namespace

uint64_t xxh3_64(const void* data, int64_t n) {
#ifdef HYPER_XXH3_AVX2
  // Inputs up to XXH3_MIDSIZE_MAX (240 bytes) take the short paths, identical either way.
  if (n > XXH3_MIDSIZE_MAX && have_avx2()) return xxh3_long_avx2(data, static_cast<size_t>(n));
#endif
  return XXH3_64bits(data, static_cast<size_t>(n));
}

std::vector<uint64_t> block_checksums(const void* data, int64_t n, int64_t block_size) {
  HYPER_CHECK_VALUE(block_size > 0, "checksum block size must be positive, got ", block_size);
  std::vector<uint64_t> out;
  if (n <= block_size) return out;
  const char* p = static_cast<const char*>(data);
  for (int64_t b = 0; b < n; b += block_size)
    out.push_back(xxh3_64(p + b, std::min(block_size, n - b)));
  return out;
}

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  HYPER_CHECK_INTERNAL(state_ != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Stream::update(const void* data, int64_t n) {
#ifdef HYPER_XXH3_AVX2
  // The same stripes as the portable update, accumulated with AVX2 (as xxh3_64).
  if (have_avx2()) {
    xxh3_update_avx2(static_cast<XXH3_state_t*>(state_), data, static_cast<size_t>(n));
    return;
  }
#endif
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, static_cast<size_t>(n));
}

uint64_t Xxh3Stream::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

std::string checksum_hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i) {
    s[static_cast<size_t>(i)] = digits[v & 0xf];
    v >>= 4;
  }
  return s;
}

}  // namespace hyper::dcp
