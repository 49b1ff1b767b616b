#include "hyper/core/format.h"

namespace hyper {

std::string join_ints(const std::vector<int64_t>& v, std::string_view sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

std::string shape_to_string(const std::vector<int64_t>& v, std::string_view sep) {
  return "[" + join_ints(v, sep) + "]";
}

}  // namespace hyper
