#pragma once
/// \file fs.h
/// POSIX file helpers for the checkpoint: read-only files with positioned reads,
/// atomic (temp + fsync + rename + fsync dir) file writes, path containment checks and
/// the fault-injection hook used by crash tests. Torch-free.
///
/// Errors: hyper::IOError (a std::runtime_error) when the OS refuses (with the path
/// and strerror); hyper::ValueError for bad input (a path leaving the checkpoint, a file
/// shorter than a requested range).

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hyper/core/errors.h"

namespace hyper::dcp {

/// hyper::IOError (hyper/core/errors.h), by its older name.
using IOError = ::hyper::IOError;

/// Read-only bytes of a file range (ReadFile::view): mapped where the file system allows it,
/// else read into a buffer the view owns. Move-only; unmaps or frees on destruction.
class FileView {
 public:
  FileView() = default;
  FileView(FileView&& o) noexcept;
  FileView& operator=(FileView&& o) noexcept;
  FileView(const FileView&) = delete;
  FileView& operator=(const FileView&) = delete;
  ~FileView();
  const char* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  friend class ReadFile;
  void reset() noexcept;
  const char* data_ = nullptr;
  int64_t size_ = 0;
  void* map_ = nullptr;  ///< the mapping (page-aligned), when mapped
  size_t map_bytes_ = 0;
  std::unique_ptr<char[]> owned_;  ///< the bytes, when read instead
};

/// A file opened read-only. Move-only; closes on destruction.
class ReadFile {
 public:
  ReadFile() = default;
  /// Opens `path` (symlinks followed: a path the user named). Never blocks: the open is
  /// non-blocking and checked on the opened descriptor, so a FIFO or device is refused at
  /// once. Throws IOError (e.g. `cannot open 'x': No such file or directory`), ValueError
  /// `'x' is not a regular file (a FIFO)`.
  explicit ReadFile(const std::string& path);

  /// Opens `relative` beneath the checkpoint directory `dir` without following any
  /// symbolic link below `dir` (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the
  /// kernel has it, else openat with O_NOFOLLOW component by component) and without
  /// blocking (O_NONBLOCK, cleared after the checks). Every check is made on the opened
  /// descriptor (fstat), so nothing can be swapped between a check and the open.
  /// Throws ValueError naming `what`:
  ///   `file '../x' of <what> leaves the checkpoint directory <dir> ('..' component)` (also
  ///   empty, absolute, NUL), `... is a symbolic link (not followed inside a checkpoint)`,
  ///   `... is not a regular file (a FIFO)` (directory, FIFO, socket, character or block
  ///   device), `... has 2 hard links (a checkpoint file has exactly one)`;
  /// IOError `cannot open '<dir>/x' (<what>): No such file or directory` and other OS errors.
  static ReadFile open_beneath(const std::string& dir, const std::string& relative,
                               const std::string& what);
  ReadFile(ReadFile&& o) noexcept;
  ReadFile& operator=(ReadFile&& o) noexcept;
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  ~ReadFile();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  /// File size at open time.
  int64_t size() const { return size_; }
  /// Reads exactly `n` bytes at `offset` (pread, retried on EINTR / short reads).
  /// Throws ValueError if [offset, offset+n) is not inside the file, IOError on a failure.
  void pread_exact(void* buf, int64_t n, int64_t offset) const;
  /// The bytes [offset, offset+n) without a copy where possible: a read-only private mapping
  /// (from the page cache), or a pread_exact into a buffer the view owns where the file
  /// system refuses mmap. Throws as pread_exact. Like every mmap reader (safetensors,
  /// numpy.memmap), a process reading a view of a file that another process truncates
  /// meanwhile gets SIGBUS; checkpoint files are never truncated or written in place by hyper.
  FileView view(int64_t offset, int64_t n) const;
  /// Throws ValueError `'<path>' changed while it was read (...)` when the file's size or
  /// modification time differ from those at open: it was written (in place) since. Renaming
  /// or unlinking it (a newer save replacing the checkpoint) is not a change: the open file
  /// keeps its bytes.
  void check_unchanged() const;

 private:
  ReadFile(int fd, std::string path, const struct ::stat& st);

  int fd_ = -1;
  int64_t size_ = 0;
  int64_t mtime_ns_ = 0;
  std::string path_;
};

/// The kind of file `mode` (a stat st_mode) names, for messages: "a regular file",
/// "a directory", "a FIFO", "a socket", "a character device", "a block device",
/// "a symbolic link", "an unknown file type".
std::string file_type_name(unsigned mode);

/// Writes a file atomically: data goes to a temporary file in the target's directory
/// (`.<name>.tmp-<pid>-<n>`); commit() fsyncs it, renames it over `path` and fsyncs the
/// directory. Destroyed without commit(), it removes the temporary file, so readers see
/// either the old file or the complete new one, never a partial one.
class AtomicFileWriter {
 public:
  /// Creates the temporary file. Throws IOError. `fault` / `fault_rank`: the fault-injection
  /// point of this file's writes (fault_errno: `HYPER_DCP_FAULT=<fault>:<rank>:enospc` makes
  /// write() fail as if the disk were full); nullptr: none.
  explicit AtomicFileWriter(std::string path, const char* fault = nullptr, int fault_rank = 0);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  /// Appends `n` bytes (retried on EINTR / short writes). Throws IOError.
  void write(const void* data, int64_t n);
  int64_t bytes_written() const { return written_; }
  /// fsync, rename over the target, fsync the directory. Throws IOError.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  /// True once the rename over the target happened (commit() may still throw afterwards,
  /// when the directory fsync fails).
  bool committed() const { return committed_; }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool committed_ = false;
  const char* fault_ = nullptr;
  int fault_rank_ = 0;
};

/// Writes `contents` to `path` atomically (AtomicFileWriter; `fault`, `fault_rank` as there).
void write_file_atomic(const std::string& path, const std::string& contents,
                       const char* fault = nullptr, int fault_rank = 0);
/// Reads a whole file of at most `max_bytes`. Throws IOError, or ValueError when larger.
std::string read_small_file(const std::string& path, int64_t max_bytes);
/// Reads the whole of an opened file of at most `max_bytes` (ValueError naming the size and
/// the limit when larger, before reading anything).
std::string read_whole_file(const ReadFile& f, int64_t max_bytes);

/// fsyncs a directory (makes renames and creations in it durable). Throws IOError.
/// Throws IOError "<what> '<path>': <strerror(errno)>".
[[noreturn]] void throw_errno(const std::string& what, const std::string& path);

void fsync_dir(const std::string& dir);
/// Creates `dir` and missing parents (mkdir -p). Throws IOError.
void make_dirs(const std::string& dir);
bool path_exists(const std::string& path);
/// Whether `path` names a directory entry, without following a final symlink (lstat).
bool path_exists_no_follow(const std::string& path);
/// Names in `dir` (no "." / ".."). Throws IOError.
std::vector<std::string> list_dir(const std::string& dir);
/// Removes a file; a missing file is not an error. Throws IOError.
void remove_file(const std::string& path);
/// The directory part of `path` ("." when none).
std::string parent_dir(const std::string& path);
/// `dir + "/" + name`.
std::string join_path(const std::string& dir, const std::string& name);

/// Checks the text of a path relative to a checkpoint directory: refuses empty, absolute,
/// NUL-containing and `..`-containing paths (ValueError `file 'x' of <what> leaves the
/// checkpoint directory <dir> (<why>)`).
void check_relative_path(const std::string& dir, const std::string& relative,
                         const std::string& what);

/// (Superseded for reading by ReadFile::open_beneath, which does not follow symlinks and
/// has no check-then-open race.) Resolves `relative` inside the checkpoint directory `dir`
/// and checks it does not leave it: rejects empty, absolute and `..`-containing paths, then compares the
/// realpath of the result (following symlinks) with realpath(dir). Returns the joined
/// path. Throws ValueError: `file '../x' of <what> leaves the checkpoint directory <dir>`;
/// IOError when the file does not exist.
std::string resolve_inside(const std::string& dir, const std::string& relative,
                           const std::string& what);

/// Fault injection for crash and fault tests. The environment variable HYPER_DCP_FAULT holds
/// one or more comma-separated specs `<point>:<rank>[:<action>]` (`<rank>` may be `*`):
/// - no action or `exit`: at the point, the process calls _exit(kFaultExitCode) (no
///   destructors, no flushing — as a crash);
/// - `sleep=<ms>`: the rank sleeps that long at the point (a slow writer, a held lock);
/// - `enospc`: only for write points (fault_errno): the write fails with ENOSPC.
/// Points used by the checkpoint (docs/checkpoint_format.md, "Fault injection"):
/// `after_lock` (coordinator holds the directory lock), `mid_data_file` (half of a data file
/// written, not committed), `after_data_file` (data file durable, before the record
/// exchange), `after_gather` (records exchanged), `before_metadata` (coordinator, all data
/// files durable, metadata not written), `after_metadata` (metadata committed, before old
/// data files are removed and before the status broadcast); write points `data_write` (the
/// data file) and `metadata_write` (.metadata). Loads: `load_between_passes` (every target
/// verified, nothing copied yet).
void fault_point(const char* point, int rank);
/// The errno a write at fault point `point` on `rank` must fail with (ENOSPC for a matching
/// `:enospc` spec), or 0.
int fault_errno(const char* point, int rank);
constexpr int kFaultExitCode = 86;

}  // namespace hyper::dcp
