#pragma once
// Helpers shared by the command-line fuzz targets.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hyper::fuzz {

/// `data` split at NUL bytes (a trailing piece without a NUL counts; an empty one does not).
inline std::vector<std::string> split_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace hyper::fuzz
