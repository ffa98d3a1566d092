// Shared helpers of the libFuzzer targets (docs/reliability.md, "Fuzzing").
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lm::fuzz {

// A scratch file per fuzzing process for parsers that only take a path (they mmap or gzopen
// it). Lives in $TMPDIR (tmpfs on most hosts) and is removed at exit.
class ScratchFile {
 public:
  explicit ScratchFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/lm_fuzz." + std::to_string(::getpid()) + suffix;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  // Replaces the file's content; aborts on an I/O error (that is the harness failing, not the parser).
  const std::string& write(const void* data, size_t n) {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || (n > 0 && std::fwrite(data, 1, n, f) != n) || std::fclose(f) != 0) std::abort();
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace lm::fuzz
