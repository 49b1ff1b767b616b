#pragma once
/// \file observer.h
/// hyper::trace::Observer — what instrumented code reports (a collective issued and done, a
/// compute region begun and ended), and Region, the guard that reports one span to an
/// optional observer. Algorithms take an `Observer*` (null: nothing is reported, nothing is
/// paid beyond a pointer test) and never know who listens; hyper::trace::Timeline is the
/// recorder that implements it.
///
///   void step(hyper::trace::Observer* obs, int rank) {
///     auto gather = hyper::trace::Region::collective(obs, "all_gather x", rank);  // issued
///     {
///       auto mm = hyper::trace::Region::compute(obs, "mm", rank);   // until '}'
///       y = heavy_matmul();
///     }
///     work.wait();
///     gather.end();                                                 // done
///   }

#include <cstdint>
#include <string>

namespace hyper::trace {

/// Receives spans from instrumented code, from any thread (implementations are thread-safe
/// and do not throw for tokens they handed out). A token is only meaningful to the observer
/// that returned it; a span may end on another thread than the one that began it.
class Observer {
 public:
  virtual ~Observer() = default;
  /// A collective named `name` was issued by `rank`; returns the token for collective_done.
  virtual int64_t collective_issued(const std::string& name, int rank) = 0;
  /// The collective `token` completed: its result was waited for (successfully or not).
  virtual void collective_done(int64_t token) = 0;
  /// `rank` started computing `name`; returns the token for compute_end.
  virtual int64_t compute_begin(const std::string& name, int rank) = 0;
  /// The compute region `token` ended.
  virtual void compute_end(int64_t token) = 0;
};

/// One span reported to an observer: begun when made, ended by end() or the destructor,
/// whichever comes first. With a null observer every call is a no-op. Move-only.
class Region {
 public:
  /// A region that reports nothing.
  Region() = default;
  /// collective_issued now; collective_done at end().
  static Region collective(Observer* observer, const std::string& name, int rank);
  /// compute_begin now; compute_end at end().
  static Region compute(Observer* observer, const std::string& name, int rank);

  Region(Region&& other) noexcept;
  Region& operator=(Region&& other) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { end(); }

  /// Reports the end (once; later calls do nothing).
  void end();
  /// True until end() when made with an observer.
  bool active() const { return observer_ != nullptr; }

 private:
  Region(Observer* observer, int64_t token, bool collective)
      : observer_(observer), token_(token), collective_(collective) {}

  Observer* observer_ = nullptr;
  int64_t token_ = -1;
  bool collective_ = false;
};

}  // namespace hyper::trace
