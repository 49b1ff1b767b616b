// libFuzzer target for the two parsers that read untrusted bytes: the safetensors
// header (length prefix + JSON) and the .metadata JSON. The first input byte picks the
// parser (even: safetensors file bytes, odd: metadata text); the rest is the input.
// Any exception other than hyper::ValueError, any crash or sanitizer report is a bug.
//   scripts/fuzz.sh 60
#include <cstddef>
#include <cstdint>
#include <string>

#include "hyper/core/errors.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* p = reinterpret_cast<const char*>(data + 1);
  const int64_t n = static_cast<int64_t>(size - 1);
  try {
    if (data[0] % 2 == 0) {
      const auto h = hyper::dcp::parse_safetensors_bytes(p, n, "fuzz");
      // Invariants of an accepted header.
      for (const auto& t : h.tensors)
        if (t.begin < h.data_start || t.end > h.file_size || t.begin > t.end) __builtin_trap();
    } else {
      const auto m = hyper::dcp::Metadata::from_json(std::string(p, static_cast<size_t>(n)), "fuzz");
      // Whatever parses must serialise and parse back to the same metadata (NaN aside).
      (void)hyper::dcp::Metadata::from_json(m.to_json(), "fuzz-roundtrip");
    }
  } catch (const hyper::ValueError&) {
  }
  return 0;
}
