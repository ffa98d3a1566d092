// Compressed text input, detected by magic bytes rather than by file name: gzip, zstd, bzip2, xz,
// and plain files. A file in any other binary format (zip, 7z, lz4, Parquet, ...) is refused by name
// before a single line is read, instead of failing later as "invalid UTF-8 at byte 1".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace lm::data {

// The compression of a file, from its first bytes: "gzip", "zstd", "bzip2", "xz" or "plain".
// Formats lmforge does not read give an InvalidArgument naming the file, the format and what to do.
absl::StatusOr<std::string> sniff_compression(std::string_view path, std::string_view head);

class ByteStream {
 public:
  // Opens `path` and picks the decoder from its magic bytes.
  static absl::StatusOr<std::unique_ptr<ByteStream>> open(const std::string& path);
  virtual ~ByteStream() = default;
  // Up to `size` decompressed bytes into buf: the count, 0 at the end, -1 on an error (error()).
  // A stream that stops before its end marker (a truncated file) is an error, not an end.
  virtual int64_t read(char* buf, size_t size) = 0;
  const std::string& error() const { return error_; }
  const std::string& format() const { return format_; }

 protected:
  int64_t fail(const char* why) {  // read()'s error return
    error_ = why;
    return -1;
  }
  std::string error_;
  std::string format_;
};

// The text size of a file for a progress total: gzip's ISIZE trailer (RFC 1952; mod 2^32), a zstd
// frame's content size when its header has one, else the file size times a typical text ratio
// (zstd 4, bzip2 4.5, xz 5); a plain file's size; a Parquet file's uncompressed data size from its
// footer (all columns; corpus/parquet.h). 0 when the file cannot be read.
uint64_t estimated_uncompressed_bytes(const std::string& path);

// The whole decompressed content of a file (small files: benchmarks, configs).
absl::StatusOr<std::string> read_decompressed(const std::string& path);

}  // namespace lm::data
