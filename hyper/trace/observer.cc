#include "hyper/trace/observer.h"

#include <utility>

namespace hyper::trace {

Region Region::collective(Observer* observer, const std::string& name, int rank) {
  if (observer == nullptr) return Region();
  return Region(observer, observer->collective_issued(name, rank), /*collective=*/true);
}

Region Region::compute(Observer* observer, const std::string& name, int rank) {
  if (observer == nullptr) return Region();
  return Region(observer, observer->compute_begin(name, rank), /*collective=*/false);
}

Region::Region(Region&& other) noexcept
    : observer_(std::exchange(other.observer_, nullptr)),
      token_(other.token_),
      collective_(other.collective_) {}

Region& Region::operator=(Region&& other) noexcept {
  if (this != &other) {
    end();
    observer_ = std::exchange(other.observer_, nullptr);
    token_ = other.token_;
    collective_ = other.collective_;
  }
  return *this;
}

void Region::end() {
  Observer* o = std::exchange(observer_, nullptr);
  if (o == nullptr) return;
  if (collective_) {
    o->collective_done(token_);
  } else {
    o->compute_end(token_);
  }
}

}  // namespace hyper::trace
