#pragma once
/// \file checksum.h
/// XXH3-64 checksums of chunk bytes (whole chunk and fixed-size blocks). Torch-free.

#include <cstdint>
#include <string>
#include <vector>

namespace hyper::dcp {

/// XXH3-64 (seed 0) of `n` bytes.
uint64_t xxh3_64(const void* data, int64_t n);

/// Checksums of consecutive `block_size`-byte blocks of `data` (the last may be shorter).
/// Empty when `n <= block_size` (the whole-chunk checksum covers it). block_size > 0.
std::vector<uint64_t> block_checksums(const void* data, int64_t n, int64_t block_size);

/// XXH3-64 (seed 0) of a byte stream fed in pieces: the same value as xxh3_64 of the
/// concatenation. Used to check a whole-chunk checksum while streaming the chunk once.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, int64_t n);
  uint64_t digest() const;

 private:
  void* state_;
};

/// 16 lower-case hex digits (the form stored in the metadata).
std::string checksum_hex(uint64_t v);

}  // namespace hyper::dcp
