#include "hyper/dcp/internal/json.h"

#include <set>
#include <vector>

#include "hyper/core/errors.h"

namespace hyper::dcp::internal {

using hyper::internal::str_cat;

namespace {

// Maximum nesting depth of `text`, counting brackets outside strings; stops early once
// past `limit`. Invalid JSON is left to the parser.
int json_depth(const char* text, size_t n, int limit) {
  int depth = 0;
  int max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) max_depth = depth;
      if (max_depth > limit) return max_depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

nlohmann::json parse_json_strict(const char* text, size_t n, const std::string& label) {
  HYPER_CHECK_VALUE(json_depth(text, n, kMaxJsonDepth) <= kMaxJsonDepth, "invalid JSON in ",
                    label, ": nested deeper than ", kMaxJsonDepth, " levels");
  // One key set per open object: duplicate keys are refused (nlohmann would keep the last).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, text + n, cb, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(str_cat("invalid JSON in ", label, ": ", e.what()));
  }
  HYPER_CHECK_VALUE(duplicate.empty(), "invalid JSON in ", label, ": duplicate key '", duplicate,
                    "'");
  return j;
}

int64_t get_count(const nlohmann::json& j, int64_t max, const std::string& what) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    HYPER_CHECK_VALUE(v <= static_cast<uint64_t>(max), what, " is ", v, ", more than ", max);
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    HYPER_CHECK_VALUE(v >= 0, what, " is negative (", v, ")");
    HYPER_CHECK_VALUE(v <= max, what, " is ", v, ", more than ", max);
    return v;
  }
  throw ValueError(str_cat(what, " must be a non-negative integer, got ", j.dump()));
}

uint64_t parse_hex64(const nlohmann::json& j, const std::string& what) {
  HYPER_CHECK_VALUE(j.is_string(), what, " must be a string of 16 hex digits, got ", j.dump());
  const std::string& s = j.get_ref<const std::string&>();
  HYPER_CHECK_VALUE(s.size() == 16, what, " must be 16 hex digits, got '", s, "'");
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else throw ValueError(str_cat(what, " must be 16 hex digits, got '", s, "'"));
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace hyper::dcp::internal
