// The run folder's lock: one writer per run folder (issue 40). Two `fit` on the same --out (a
// scheduler that restarts a job while the old one still lives) interleaved metrics.jsonl and
// wrote over each other's checkpoints. The lock is flock(2) on RUN/run.lock, exclusive and
// non-blocking, taken before anything else is written; the kernel releases it when its holder
// dies, however it dies, so a lock file a kill -9 left behind is taken over on its own. The
// file's content (pid, host, start time, command) is only what the refusal names.
// Readers (lmeval, export) take no lock: a checkpoint is a folder renamed into place with a
// checksummed manifest (core/checkpoint_manifest.h), so they read a whole one or none.
#pragma once

#include <string>

#include "core/config.h"
#include "core/status.h"

namespace lm {

class RunLock {
 public:
  // Takes the lock of run folder `dir`, creating the folder (and parents) when missing, and
  // writes this process's pid, host, start time and command line into the file.
  // Unavailable (exit 1: a restart loop tries again) naming the holder's pid, host and command
  // when another process holds it; a failed create names the folder and the real cause.
  static absl::StatusOr<RunLock> acquire(const std::string& dir);

  RunLock() = default;
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  // Releases: removes the lock file (while still holding it, see acquire), and the folder when
  // this lock created it and it is still empty (a refused start leaves nothing behind).
  ~RunLock();

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // What the lock file said when this process took it over from a process that no longer
  // holds it (a kill -9 leaves the file); empty when the file was new.
  const Json& previous_holder() const { return previous_; }

 private:
  void release();
  int fd_ = -1;
  std::string dir_, path_;
  bool made_dir_ = false;
  Json previous_;
};

// "RUN/run.lock": the file name, for the folder's own listing (RunFolder::contents).
inline constexpr const char* kRunLockName = "run.lock";

}  // namespace lm
