#include "hyper/dcp/checksum.h"

// Header-only xxHash: no -lxxhash for consumers of the static library.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hyper/core/errors.h"

namespace hyper::dcp {

uint64_t xxh3_64(const void* data, int64_t n) {
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
