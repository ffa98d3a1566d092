#include "core/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/mapped_guard.h"

namespace lm {
absl::Status errno_status(std::string_view what, const std::string& path, std::string_view after) {
  const int err = errno;
  std::string msg = absl::StrCat(path, ": ", std::string(what), " failed: ", std::strerror(err));
  // Out of room (a full disk, a quota, a file size limit such as `ulimit -f`). ResourceExhausted
  // maps to exit 2 (fix and rerun).
  if (err == ENOSPC || err == EDQUOT)
    return absl::ResourceExhaustedError(absl::StrCat(msg, " (no space left: free space and retry; ", std::string(after), ")"));
  if (err == EFBIG)
    return absl::ResourceExhaustedError(absl::StrCat(
        msg, " (file size limit reached: raise `ulimit -f` or use another file system; ", std::string(after), ")"));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES) return absl::FailedPreconditionError(msg + " (check permissions)");
  return absl::InternalError(msg);
}

absl::Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return errno_status("open folder", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_status("fsync folder", dir);
  return absl::OkStatus();
}

absl::Status fsync_tree(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file()) continue;
    int fd = ::open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) return errno_status("open", entry.path().string());
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) return errno_status("fsync", entry.path().string());
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  return fsync_dir(dir);
}

absl::Status write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = absl::StrFormat("%s.tmp.%d", path, static_cast<int>(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("create", tmp);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = errno_status("write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status st = errno_status("fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::close(fd) != 0) {
    absl::Status st = errno_status("close", tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status st = errno_status("rename to " + path, tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  return fsync_dir(std::filesystem::path(path).parent_path().string());
}

namespace {
// nftw's callback has no user pointer: the first failure of the walk in progress (one walk at a
// time per thread).
thread_local std::string remove_tree_failure;

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = (type == FTW_DP) ? ::rmdir(path) : ::unlink(path);
  if (rc != 0 && errno != ENOENT) {
    remove_tree_failure = absl::StrFormat("%s: remove failed: %s", path, std::strerror(errno));
    return 1;  // stop the walk
  }
  return 0;
}
}  // namespace

absl::Status remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : errno_status("lstat", path);
  }
  remove_tree_failure.clear();
  // FTW_DEPTH: a folder after its contents; FTW_PHYS: a link is removed, not followed.
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    if (!remove_tree_failure.empty()) return absl::InternalError(remove_tree_failure);
    return errno_status("walk", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open", path);
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = errno_status("read", path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

namespace {
void unmap(const uint8_t* data, size_t size) {
  unregister_mapping(data);
  ::munmap(const_cast<uint8_t*>(data), size);
}
}  // namespace

absl::StatusOr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = errno_status("stat", path);
    ::close(fd);
    return s;
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      absl::Status s = errno_status("mmap", path);
      ::close(fd);
      return s;
    }
    f.data_ = static_cast<const uint8_t*>(p);
    register_mapping(f.data_, f.size_, path);  // a read past a shrunk file's end: core/mapped_guard.h
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) unmap(data_, size_);
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) unmap(data_, size_);
}

uint32_t crc32(const void* data, size_t size, uint32_t seed) {
  // zlib's crc32 takes uInt lengths: feed large buffers in 1 GiB pieces.
  uLong crc = seed;
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const size_t n = size > (1u << 30) ? (1u << 30) : size;
    crc = ::crc32(crc, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

uint64_t fnv1a64(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t value) { return absl::StrFormat("%016x", value); }

absl::Status check_new_output(const std::string& dir, bool force, std::string_view what, std::string_view force_flag) {
  std::error_code ec;
  if (force || !std::filesystem::exists(dir, ec)) return absl::OkStatus();
  if (std::filesystem::is_directory(dir, ec) && std::filesystem::is_empty(dir, ec)) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat(
      dir, ": already holds ", std::string(what), " (runs and shards made from it would silently change); write to "
      "another folder, or pass ", std::string(force_flag), " to replace it"));
}

std::string name_list(std::vector<std::string> names, size_t shown) {
  std::sort(names.begin(), names.end());
  const size_t n = names.size();
  if (n > shown) names.resize(shown);
  return absl::StrCat(absl::StrJoin(names, ", "), n > shown ? absl::StrCat(" and ", n - shown, " more") : "");
}

}  // namespace lm
