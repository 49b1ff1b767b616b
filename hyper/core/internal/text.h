#pragma once
// A tiny recursive-descent reader for the core's text forms (placements, shapes,
// layouts). Errors throw hyper::ValueError naming the whole text and the position.

#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/format.h"

namespace hyper::internal {

class TextReader {
 public:
  explicit TextReader(const std::string& text) : text_(text) {}

  void skip_space();
  bool at_end();
  /// True (and consumed) if the next non-space characters are `token`.
  bool try_consume(const std::string& token);
  /// Consumes `token` or throws.
  void expect(const std::string& token);
  int64_t read_int();
  /// Letters, digits, '_' (at least one).
  std::string read_word();
  /// `[a,b,c]` of ints (empty allowed).
  std::vector<int64_t> read_int_list(char open = '[', char close = ']');
  /// `(a, b)` or `(a,)` python-tuple style ints.
  std::vector<int64_t> read_tuple();
  std::size_t pos() const { return pos_; }
  const std::string& text() const { return text_; }
  void set_pos(std::size_t p) { pos_ = p; }
  [[noreturn]] void fail(const std::string& what) const;
  /// Throws unless everything was consumed.
  void expect_end();

 private:
  const std::string& text_;
  std::size_t pos_ = 0;
};

/// `(0,)` / `(0, 1)` — python tuple form used by RaggedShard.
std::string ints_to_tuple(const std::vector<int64_t>& v);

}  // namespace hyper::internal
