#include "hyper/core/internal/text.h"

#include <cctype>

#include "hyper/core/errors.h"

namespace hyper::internal {

void TextReader::skip_space() {
  while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
}

bool TextReader::at_end() {
  skip_space();
  return pos_ >= text_.size();
}

bool TextReader::try_consume(const std::string& token) {
  skip_space();
  if (text_.compare(pos_, token.size(), token) == 0) {
    pos_ += token.size();
    return true;
  }
  return false;
}

void TextReader::expect(const std::string& token) {
  if (!try_consume(token)) fail("expected '" + token + "'");
}

int64_t TextReader::read_int() {
  skip_space();
  std::size_t start = pos_;
  if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
  std::size_t digits = pos_;
  while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  if (pos_ == digits) {
    pos_ = start;
    fail("expected an integer");
  }
  if (pos_ - digits > 18) {
    pos_ = start;
    fail("integer too large");
  }
  return std::stoll(text_.substr(start, pos_ - start));
}

std::string TextReader::read_word() {
  skip_space();
  std::size_t start = pos_;
  while (pos_ < text_.size() &&
         (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
    ++pos_;
  if (pos_ == start) fail("expected a name");
  return text_.substr(start, pos_ - start);
}

std::vector<int64_t> TextReader::read_int_list(char open, char close) {
  expect(std::string(1, open));
  std::vector<int64_t> out;
  if (try_consume(std::string(1, close))) return out;
  while (true) {
    out.push_back(read_int());
    if (try_consume(std::string(1, close))) return out;
    expect(",");
    if (try_consume(std::string(1, close))) return out;  // trailing comma: (0,)
  }
}

std::vector<int64_t> TextReader::read_tuple() { return read_int_list('(', ')'); }

void TextReader::fail(const std::string& what) const {
  throw ValueError(str_cat("cannot parse '", text_, "' at position ", pos_, ": ", what));
}

void TextReader::expect_end() {
  if (!at_end()) fail("unexpected trailing text");
}

std::string ints_to_tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  if (v.size() == 1) s += ",";
  return s + ")";
}

}  // namespace hyper::internal
