#include "hyper/comm/c10_errors.h"

namespace hyper {

std::string message_of(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

void rethrow_foreign_error(const std::exception& e, const std::string& context) {
  if (dynamic_cast<const ValueError*>(&e) || dynamic_cast<const NotImplementedError*>(&e) ||
      dynamic_cast<const InternalError*>(&e) || dynamic_cast<const CommError*>(&e) ||
      dynamic_cast<const IOError*>(&e) || dynamic_cast<const SaveError*>(&e)) {
    throw;
  }
  throw CommError(context.empty() ? message_of(e) : context + ": " + message_of(e));
}

namespace internal {

void rethrow_c10_error(const c10::Error& e, const std::string& context, ErrorKind fallback) {
  if (const auto* oom = dynamic_cast<const c10::OutOfMemoryError*>(&e)) throw *oom;
  const std::string what = context.empty() ? std::string(e.what_without_backtrace())
                                           : context + ": " + e.what_without_backtrace();
  ErrorKind kind = fallback;
  if (dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr) {
    kind = ErrorKind::kNotImplemented;
  } else if (dynamic_cast<const c10::ValueError*>(&e) != nullptr ||
             dynamic_cast<const c10::IndexError*>(&e) != nullptr ||
             dynamic_cast<const c10::TypeError*>(&e) != nullptr) {
    kind = ErrorKind::kValue;
  } else if (dynamic_cast<const c10::DistError*>(&e) != nullptr) {
    kind = ErrorKind::kComm;
  }
  switch (kind) {
    case ErrorKind::kValue: throw ValueError(what);
    case ErrorKind::kNotImplemented: throw NotImplementedError(what);
    case ErrorKind::kComm: throw CommError(what);
    case ErrorKind::kIO: throw IOError(what);
    case ErrorKind::kInternal: break;
  }
  throw InternalError(what);
}

}  // namespace internal
}  // namespace hyper
