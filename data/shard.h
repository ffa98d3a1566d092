// Token shards (*.lmtok): a fixed little-endian header, the token payload (16- or 32-bit ids),
// and the document offsets. Written atomically by ShardWriter, read by mmap with every header
// field validated (docs/data.md has the byte layout).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/status.h"

namespace lm::data {

inline constexpr char kShardMagic[8] = {'L', 'M', 'T', 'O', 'K', 'S', 'H', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kShardHeaderSize = 128;
inline constexpr size_t kShardHashBytes = 40;  // tokenizer hash, ASCII, zero-padded

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_width = 2;  // bytes per token: 2 when vocab_size <= 65536, else 4
  uint32_t vocab_size = 0;
  std::string tokenizer_hash;
  uint64_t n_tokens = 0;
  uint64_t n_docs = 0;
  uint32_t payload_crc = 0;  // CRC-32 of the token payload bytes
  uint32_t index_crc = 0;    // CRC-32 of the document offset table
  uint32_t header_crc = 0;   // CRC-32 of header bytes [0, 124)
};

// Token width the writer picks for a vocabulary: 16-bit ids while they fit.
uint32_t token_width_for(uint32_t vocab_size);

// Accumulates documents in memory and writes one shard atomically (temp + fsync + rename).
class ShardWriter {
 public:
  ShardWriter(uint32_t vocab_size, std::string tokenizer_hash);

  // Appends one document (its tokens, including any EOS the caller wants after it).
  // Ids must lie in [0, vocab_size); an out-of-range id is an InvalidArgument error.
  absl::Status add_document(const int32_t* tokens, size_t n);
  absl::Status add_document(const std::vector<int32_t>& tokens) {
    return add_document(tokens.data(), tokens.size());
  }

  uint64_t n_tokens() const { return n_tokens_; }
  uint64_t n_docs() const { return offsets_.size() - 1; }

  // Writes the shard to `path` and clears the writer for the next shard.
  absl::Status write(const std::string& path);

 private:
  uint32_t vocab_size_;
  uint32_t width_;
  std::string hash_;
  std::string payload_;             // little-endian ids, width_ bytes each
  std::vector<uint64_t> offsets_;   // n_docs + 1 document starts; the last is n_tokens
  uint64_t n_tokens_ = 0;
};

// One-call form of ShardWriter for tests and tools: `doc_offsets` are the n_docs + 1 starts
// (first 0, last tokens.size()); empty means one document spanning all tokens.
absl::Status write_shard(const std::string& path, const std::vector<int32_t>& tokens,
                         const std::vector<uint64_t>& doc_offsets, uint32_t vocab_size,
                         const std::string& tokenizer_hash);

// Read-only view of one shard, backed by a shared mmap: copies are cheap and share the mapping.
class ShardReader {
 public:
  // Validates magic, version, header checksum, token width, vocabulary, sizes and the offset
  // table; with verify_checksum also the payload CRC and that every id is below vocab_size.
  // Errors name the file and the field: DataLoss (corrupt, truncated), InvalidArgument (not a
  // shard), FailedPrecondition (newer format version).
  static absl::StatusOr<ShardReader> open(const std::string& path, bool verify_checksum = true);

  ShardReader() = default;
  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return header_.n_tokens; }
  int32_t token(uint64_t i) const {
    return width_ == 2 ? static_cast<int32_t>(read_u16(i)) : static_cast<int32_t>(read_u32(i));
  }
  // Copies tokens [begin, begin + n) to `out`; the range must lie inside the shard.
  void copy(uint64_t begin, uint64_t n, int32_t* out) const;
  // n_docs + 1 values: document d spans tokens [offsets[d], offsets[d + 1]).
  std::vector<uint64_t> doc_offsets() const;
  // Hints the kernel to read tokens [begin, begin + n) ahead (madvise WILLNEED); never fails.
  void prefetch(uint64_t begin, uint64_t n) const;

 private:
  uint16_t read_u16(uint64_t i) const {
    uint16_t v;
    __builtin_memcpy(&v, payload_ + 2 * i, 2);
    return v;
  }
  uint32_t read_u32(uint64_t i) const {
    uint32_t v;
    __builtin_memcpy(&v, payload_ + 4 * i, 4);
    return v;
  }

  std::shared_ptr<const MappedFile> file_;
  std::string path_;
  ShardHeader header_;
  uint32_t width_ = 2;
  const uint8_t* payload_ = nullptr;
  const uint8_t* index_ = nullptr;
};

}  // namespace lm::data
