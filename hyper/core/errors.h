#pragma once
/// \file errors.h
/// hyper's one error vocabulary, thrown by every layer (docs/errors.md). Each type derives
/// from a standard exception so that later Python bindings map ValueError /
/// NotImplementedError / RuntimeError for free, and so that callers can catch either kind
/// without knowing hyper. Torch-free: c10 errors are mapped to these types where hyper calls
/// LibTorch (hyper/comm/c10_errors.h).

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

/// Something hyper itself got wrong: a broken internal invariant (a bug to report, never
/// the caller's input).
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

/// A collective failed (timeout, peer gone, size mismatch on the wire). The message starts
/// with the collective and its group: `all_gather_v on group [0,1,2] (rank 1): ...`.
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& what) : std::runtime_error(what) {}
};

/// An operating-system failure (open, read, write, fsync, rename): names the path and errno.
class IOError : public std::runtime_error {
 public:
  explicit IOError(const std::string& what) : std::runtime_error(what) {}
};

/// A checkpoint save that failed on some rank; thrown on every rank
/// (`save to '<dir>' failed: rank 1: <error>; ...; nothing was committed`, or "the commit
/// state is unknown" on a rank that could not learn rank 0's outcome).
class SaveError : public std::runtime_error {
 public:
  explicit SaveError(const std::string& what) : std::runtime_error(what) {}
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

/// Throws hyper::InternalError when `cond` is false: an invariant that holds unless hyper has
/// a bug. The message is `internal error: <streamed message> (<cond> is false)`.
#define HYPER_CHECK_INTERNAL(cond, ...)                                                          \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw ::hyper::InternalError(                                                              \
          ::hyper::internal::str_cat("internal error: ", __VA_ARGS__, " (" #cond " is false)")); \
  } while (0)
