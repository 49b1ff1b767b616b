#pragma once
/// \file blocked_time.h
/// How long the calling thread has waited for communication: the diagnostic that tells
/// how much of a step's communication is exposed (on its critical path) and how much an
/// asynchronous schedule hid.
///
/// Counted: wall time inside comm::Work::wait while the collective's transfers are still in
/// flight (not its epilogue's copies), the polling of a timed wait, and the small blocking
/// exchanges of row counts (an all_gather_v without sizes). A synchronous collective counts its whole transfer,
/// including the time spent waiting for a slower peer to arrive; one issued asynchronously
/// and waited for after other work counts only what that work did not cover.
/// Per thread (thread-mode tests run each rank on its own thread; the CPU autograd engine
/// runs a backward on the thread that called it), monotonic until reset.
///
///   hyper::comm::reset_blocked_time();
///   step();                                              // forward, backward, optimizer
///   double exposed = hyper::comm::blocked_seconds();     // this thread's waits in step()

namespace hyper::comm {

/// Seconds the calling thread has spent blocked on communication since its last
/// reset_blocked_time() (or its start).
double blocked_seconds();
/// Sets the calling thread's counter to zero.
void reset_blocked_time();

namespace internal {
/// Adds the wall time between its construction and destruction to the calling thread's
/// counter.
class BlockedScope {
 public:
  BlockedScope();
  ~BlockedScope();
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;

 private:
  long long start_ns_;
};
}  // namespace internal

}  // namespace hyper::comm
