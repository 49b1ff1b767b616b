#pragma once
/// \file c10_errors.h
/// The boundary between LibTorch's errors and hyper's (docs/errors.md). Where hyper calls
/// c10d or ATen and a c10::Error could escape to the caller, it catches it and rethrows the
/// hyper type (hyper/core/errors.h) with context and c10's message without its backtrace:
///
///   try {
///     works.push_back(pg->allreduce(tensors, opts));
///   } catch (const c10::Error& e) {
///     rethrow_c10_error<CommError>(e, what);  // "<what>: <c10's message>"
///   }
///
/// Which type: c10::NotImplementedError -> hyper::NotImplementedError; c10::ValueError,
/// IndexError, TypeError -> hyper::ValueError; c10::DistError and its subclasses (backend,
/// store, network) -> hyper::CommError; c10::OutOfMemoryError is rethrown unchanged (a
/// resource of the device, not a fault of the call); any other c10::Error -> `Fallback`, the
/// type of the boundary (CommError around a collective, ValueError around an ATen call on the
/// caller's tensors).

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "hyper/core/errors.h"

namespace hyper {

/// The message of `e` without a c10 backtrace: c10::Error::what_without_backtrace() for a
/// c10 error, what() for any other exception.
std::string message_of(const std::exception& e);

namespace internal {
/// The kinds rethrow_c10_error() chooses from.
enum class ErrorKind { kValue, kNotImplemented, kComm, kIO, kInternal };
template <typename E>
constexpr ErrorKind kind_of() {
  static_assert(std::is_same_v<E, ValueError> || std::is_same_v<E, NotImplementedError> ||
                    std::is_same_v<E, CommError> || std::is_same_v<E, IOError> ||
                    std::is_same_v<E, InternalError>,
                "rethrow_c10_error: Fallback must be one of hyper's error types");
  if constexpr (std::is_same_v<E, ValueError>) return ErrorKind::kValue;
  else if constexpr (std::is_same_v<E, NotImplementedError>) return ErrorKind::kNotImplemented;
  else if constexpr (std::is_same_v<E, CommError>) return ErrorKind::kComm;
  else if constexpr (std::is_same_v<E, IOError>) return ErrorKind::kIO;
  else return ErrorKind::kInternal;
}
[[noreturn]] void rethrow_c10_error(const c10::Error& e, const std::string& context,
                                    ErrorKind fallback);
}  // namespace internal

/// Throws hyper's type for the c10 error `e` (table above) with the message
/// `<context>: <c10's message without backtrace>` (just c10's message when `context` is
/// empty). Call it in a `catch (const c10::Error& e)` block at a boundary.
template <typename Fallback>
[[noreturn]] void rethrow_c10_error(const c10::Error& e, const std::string& context) {
  internal::rethrow_c10_error(e, context, internal::kind_of<Fallback>());
}

/// Runs `f()` and returns its result; a c10::Error escaping it goes through
/// rethrow_c10_error<Fallback>(e, context). Other exceptions pass unchanged.
///
///   at::Tensor y = with_c10_errors<ValueError>("hyper::ops::add", [&] { return a + b; });
/// For a `catch (const std::exception&)` after a c10::Error handler around c10d/Gloo calls:
/// hyper's own errors are rethrown unchanged; anything else (gloo::IoException, a
/// std::system_error from a socket: not c10::Errors) becomes a CommError naming `context`.
/// Call only inside the handler.
[[noreturn]] void rethrow_foreign_error(const std::exception& e, const std::string& context);

template <typename Fallback, typename F>
decltype(auto) with_c10_errors(const std::string& context, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const c10::Error& e) {
    rethrow_c10_error<Fallback>(e, context);
  }
}

}  // namespace hyper
