#include "hyper/trace/event.h"

namespace hyper::trace {

const char* to_string(RegionKind kind) {
  return kind == RegionKind::kComm ? "comm" : "compute";
}

std::string TimelineEvent::row() const { return stream.empty() ? to_string(kind) : stream; }

}  // namespace hyper::trace
