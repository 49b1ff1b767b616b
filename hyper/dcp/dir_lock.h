#pragma once
/// \file dir_lock.h
/// The writer lock of a checkpoint directory (docs/checkpoint_format.md, "Directory lock").
/// A save's coordinator holds an exclusive `flock` on `<dir>/.lock` from before any data file
/// is written until after the commit, so two saves into one directory (two jobs, two worlds)
/// never interleave: the second is refused at once, naming the holder. The lock file holds a
/// short text naming its holder (pid, host, job, save id, start time); the other ranks read the
/// save id back from it to prove they write into the very directory the coordinator locked.
/// Torch-free.

#include <string>

namespace hyper::dcp {

/// Name of the lock file in a checkpoint directory.
inline constexpr const char* kLockFileName = ".lock";

/// An exclusive writer lock on a checkpoint directory. Move-only; released on destruction
/// (the file is emptied and closed, never removed) or by the process's death (the file keeps
/// the dead holder's line until the next holder overwrites it).
class DirLock {
 public:
  DirLock() = default;
  /// Takes the lock on `dir`/.lock without blocking (created with O_CLOEXEC | O_NOFOLLOW,
  /// mode 0644; `dir` must exist) and writes `holder` into it. Throws SaveError when another
  /// writer holds it: `checkpoint directory '<dir>' is locked by another save (<holder text>);
  /// concurrent saves into one directory are refused`; IOError when the OS refuses (a symlink
  /// or a non-regular `.lock`, permissions).
  DirLock(const std::string& dir, const std::string& holder);
  DirLock(DirLock&& o) noexcept;
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  bool held() const { return fd_ >= 0; }
  /// Releases the lock now (idempotent).
  void release() noexcept;

 private:
  int fd_ = -1;
  bool locked_ = false;
};

/// Text naming this process as a lock holder: `pid <pid> on host <host>[, job <id>], save
/// <save_id>, since <UTC time>`. The job is the first set of $HYPER_JOB_ID, $SLURM_JOB_ID,
/// $TORCHELASTIC_RUN_ID.
std::string lock_holder_text(const std::string& save_id);

/// The contents of `dir`/.lock (at most 4 KiB; opened with O_NOFOLLOW), or "" when it does not
/// exist. Throws IOError on other failures.
std::string read_lock_file(const std::string& dir);

/// A fresh save id: 16 random hex digits (names a save in its lock file).
std::string new_save_id();

/// This host's name ("?" if unknown).
std::string host_name();

}  // namespace hyper::dcp
