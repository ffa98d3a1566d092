// File helpers: atomic writes (temp + fsync + rename), whole-file reads, mmap, checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lm {

// Writes `data` to `path` so that a crash or kill leaves either the old file or the new one,
// never a torn one: write to `path.tmp.<pid>`, fsync it, rename over `path`, fsync the folder.
// The Status for a failed system call on `path`, from errno: "PATH: WHAT failed: strerror". A full
// disk, quota or file size limit is ResourceExhausted (exit 2) with `after` appended to the hint
// (what is left intact, what to do next); ENOENT NotFound, EACCES FailedPrecondition, else Internal.
absl::Status errno_status(std::string_view what, const std::string& path,
                          std::string_view after = "the previous file is intact");

absl::Status write_file_atomic(const std::string& path, std::string_view data);

// Never replace an output a later step depends on without being asked: an existing, non-empty
// `dir` is AlreadyExists naming the folder and `force_flag` (OK when `force`, or when `dir` is
// missing or empty). `what` says what the folder holds ("tokenizer", "shards").
absl::Status check_new_output(const std::string& dir, bool force, std::string_view what,
                              std::string_view force_flag = "--force");

// "a, b, c and 4 more": `names` sorted, the first `shown` of them, for a message saying what a
// folder holds.
std::string name_list(std::vector<std::string> names, size_t shown = 5);

// Removes `path` and everything under it (not following symbolic links); a missing path is OK.
// Our own walk (nftw) instead of std::filesystem::remove_all: the torch wheel's libtorch_cpu.so
// exports a static copy of std::filesystem (pytorch/pytorch#133437), and a remove_all call bound
// to it jumped to address 0 (docs/gpu.md). Returns the first failure naming the path.
absl::Status remove_tree(const std::string& path);

// fsyncs a folder so that a rename inside it is durable.
absl::Status fsync_dir(const std::string& dir);

// fsyncs every regular file in `dir` and then the folder itself.
absl::Status fsync_tree(const std::string& dir);

absl::StatusOr<std::string> read_file(const std::string& path);

// Read-only memory map of a whole file; movable, unmaps on destruction.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// CRC-32 (zlib polynomial) of a buffer; `seed` chains calls.
uint32_t crc32(const void* data, size_t size, uint32_t seed = 0);

// FNV-1a 64-bit, as 16 lowercase hex digits: a stable content hash (not cryptographic).
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);
std::string hex64(uint64_t value);

}  // namespace lm
