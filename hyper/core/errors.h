#pragma once
/// \file errors.h
/// The core's exception hierarchy. It derives from the standard exceptions so that
/// later Python bindings map ValueError / NotImplementedError for free, and so
/// that torch-facing code can catch either kind without knowing the core.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace hyper {

/// Bad input: a value, shape, placement or layout that can never be valid.
class ValueError : public std::invalid_argument {
 public:
  explicit ValueError(const std::string& what) : std::invalid_argument(what) {}
};

/// A valid request that hyper does not implement (fail-closed, never a silent fallback).
class NotImplementedError : public std::logic_error {
 public:
  explicit NotImplementedError(const std::string& what) : std::logic_error(what) {}
};

namespace internal {
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace internal

}  // namespace hyper

/// Throws hyper::ValueError with the streamed message when `cond` is false.
#define HYPER_CHECK_VALUE(cond, ...)                                              \
  do {                                                                            \
    if (!(cond)) throw ::hyper::ValueError(::hyper::internal::str_cat(__VA_ARGS__)); \
  } while (0)

/// Throws hyper::NotImplementedError with the streamed message when `cond` is false.
#define HYPER_CHECK_IMPLEMENTED(cond, ...)                                                 \
  do {                                                                                     \
    if (!(cond)) throw ::hyper::NotImplementedError(::hyper::internal::str_cat(__VA_ARGS__)); \
  } while (0)
