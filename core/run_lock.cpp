#include "core/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/log.h"

namespace lm {
namespace fs = std::filesystem;

namespace {

// This process's command line, arguments joined by spaces (capped: it is only for the message).
std::string command_line() {
  auto raw = read_file("/proc/self/cmdline");
  if (!raw.ok()) return "";
  std::string s = *raw;
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s.size() > 300 ? s.substr(0, 300) + " ..." : s;
}

std::string read_fd(int fd) {
  std::string out;
  char buf[1024];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
    if (out.size() > 16384) break;
  }
  return out;
}

Json parse_holder(const std::string& text) {
  try {
    Json j = Json::parse(text);
    if (j.is_object()) return j;
  } catch (...) {
  }
  return Json::object();
}

std::string holder_text(const Json& h) {
  if (!h.contains("pid")) return "a process that has not yet written its pid (it is starting)";
  return absl::StrCat("pid ", h["pid"].dump(), " on host ", h.value("host", "?"), ", since ", h.value("started", "?"),
                      ": ", h.value("command", "?"));
}

}  // namespace

absl::StatusOr<RunLock> RunLock::acquire(const std::string& dir) {
  RunLock lock;  // its destructor removes a folder it made when a step below fails
  lock.dir_ = dir;
  lock.path_ = (fs::path(dir) / kRunLockName).string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (!fs::create_directories(dir, ec) && ec)
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": cannot create the run folder: ", ec.message(), " (pick an --out on a writable file system)"));
    lock.made_dir_ = true;
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return errno_status("create the lock file", lock.path_, "the run folder must be writable");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const Json holder = parse_holder(read_fd(fd));
      ::close(fd);
      if (err != EWOULDBLOCK) {
        errno = err;
        return errno_status("lock", lock.path_);
      }
      return absl::UnavailableError(absl::StrCat(
          dir, ": another process is writing this run (", holder_text(holder),
          "); two writers would interleave metrics.jsonl and overwrite each other's checkpoints. Wait for it to "
          "end, or stop it (kill ", holder.value("pid", Json("PID")).dump(), " on ", holder.value("host", "its host"),
          "); its lock (", lock.path_, ") is released the moment it exits, however it exits"));
    }
    // The holder before us removes the file while it still holds it (release): a file we opened
    // just before that is no longer the lock. Take the one the path names now.
    struct stat mine {}, named {};
    if (::fstat(fd, &mine) != 0 || ::stat(lock.path_.c_str(), &named) != 0 || mine.st_ino != named.st_ino ||
        mine.st_dev != named.st_dev) {
      ::close(fd);
      continue;
    }
    lock.fd_ = fd;
    lock.previous_ = parse_holder(read_fd(fd));
    const Json me = {{"pid", static_cast<int64_t>(::getpid())}, {"host", host_name("unknown")}, {"started", utc_time(std::time(nullptr))},
                     {"command", command_line()}};
    const std::string text = me.dump() + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
      return errno_status("write", lock.path_, "the run folder must be writable");
    return std::move(lock);
  }
  return absl::UnavailableError(absl::StrCat(lock.path_, ": the lock file kept changing under this process (another "
                                             "process starts and stops on this run folder); try again"));
}

RunLock::RunLock(RunLock&& o) noexcept
    : fd_(o.fd_), dir_(std::move(o.dir_)), path_(std::move(o.path_)), made_dir_(o.made_dir_),
      previous_(std::move(o.previous_)) {
  o.fd_ = -1;
  o.made_dir_ = false;
}

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    path_ = std::move(o.path_);
    made_dir_ = o.made_dir_;
    previous_ = std::move(o.previous_);
    o.fd_ = -1;
    o.made_dir_ = false;
  }
  return *this;
}

RunLock::~RunLock() { release(); }

void RunLock::release() {
  if (fd_ >= 0) {
    ::unlink(path_.c_str());  // while still held: see the inode check in acquire
    ::close(fd_);
    fd_ = -1;
  }
  if (made_dir_) ::rmdir(dir_.c_str());  // only when empty: a refused start leaves no folder
  made_dir_ = false;
}

}  // namespace lm
