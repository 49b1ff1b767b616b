#pragma once
// Hardened JSON parsing of the safetensors header (parse_json_strict), and value helpers
// shared with the streaming .metadata reader (metadata.cc, an nlohmann SAX handler)
// (not installed; includes nlohmann/json, so only .cc files of hyper::dcp include it).

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace hyper::dcp::internal {

/// Nesting deeper than this is refused before parsing.
constexpr int kMaxJsonDepth = 64;

/// Parses `text` as JSON. Refuses (ValueError naming `label`): invalid JSON, nesting
/// deeper than kMaxJsonDepth, an object with a duplicate key (naming the key).
nlohmann::json parse_json_strict(const char* text, size_t n, const std::string& label);

/// A non-negative integer at most `max` from a JSON number (integers only; a float,
/// negative or larger value throws ValueError naming `what`).
int64_t get_count(const nlohmann::json& j, int64_t max, const std::string& what);

/// Parses 16 hex digits. Throws ValueError naming `what`.
uint64_t parse_hex64(const nlohmann::json& j, const std::string& what);

}  // namespace hyper::dcp::internal
