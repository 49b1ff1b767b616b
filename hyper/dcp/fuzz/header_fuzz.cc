// libFuzzer target for the two parsers that read untrusted bytes: the safetensors
// header (length prefix + JSON; parse_safetensors_bytes) and the .metadata JSON
// (Metadata::from_json, through hyper's own JSON reader internal/json.cc). The first input
// byte picks the parser (even: safetensors file bytes, odd: metadata text); the rest is the
// input; the seed corpus (corpus/st_*, corpus/meta_*) starts both.
// Any exception other than hyper::ValueError, any crash, sanitizer report or broken
// invariant (__builtin_trap) is a bug.
//   scripts/fuzz.sh 60          (scripts/test.sh runs it for HYPER_FUZZ_SECONDS, default 30)
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
      // Whatever parses must serialise, parse back, and serialise to the same text (a
      // fixpoint; compared as text so that NaN values compare equal).
      const std::string text = m.to_json();
      try {
        if (hyper::dcp::Metadata::from_json(text, "fuzz-roundtrip").to_json() != text)
          __builtin_trap();
      } catch (const hyper::ValueError&) {
        __builtin_trap();  // our own output rejected
      }
    }
  } catch (const hyper::ValueError&) {
  }
  return 0;
}
