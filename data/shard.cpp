#include "data/shard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token shards are little-endian and read in place; add byte swapping for this host");

namespace lm::data {
namespace {

// Byte offsets of the header fields (docs/data.md).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffWidth = 12;
constexpr size_t kOffVocab = 16;
constexpr size_t kOffHeaderSize = 20;
constexpr size_t kOffTokens = 24;
constexpr size_t kOffDocs = 32;
constexpr size_t kOffPayloadCrc = 40;
constexpr size_t kOffIndexCrc = 44;
constexpr size_t kOffHash = 48;
constexpr size_t kOffHeaderCrc = 124;
static_assert(kOffHash + kShardHashBytes <= kOffHeaderCrc, "header fields overlap");

const char* kRedo = "re-run 'lmtrain prepare' to rebuild the shards";

template <class T>
void put(std::string& buf, size_t off, T v) {
  std::memcpy(&buf[off], &v, sizeof(T));
}
template <class T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

uint64_t align8(uint64_t x) { return (x + 7) & ~uint64_t{7}; }

std::string printable(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const char c = static_cast<char>(p[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      out += absl::StrFormat("\\x%02x", p[i]);
    }
  }
  return out;
}

}  // namespace

uint32_t token_width_for(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

ShardWriter::ShardWriter(uint32_t vocab_size, std::string tokenizer_hash)
    : vocab_size_(vocab_size), width_(token_width_for(vocab_size)), hash_(std::move(tokenizer_hash)) {
  offsets_.push_back(0);
}

absl::Status ShardWriter::add_document(const int32_t* tokens, size_t n) {
  const size_t old = payload_.size();
  payload_.resize(old + n * width_);
  char* dst = &payload_[old];
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || static_cast<uint32_t>(t) >= vocab_size_) {
      payload_.resize(old);
      return absl::InvalidArgumentError(absl::StrFormat(
          "token id %d at position %d of document %d is outside the vocabulary [0, %d) "
          "(the tokenizer and the shard's vocab_size disagree)",
          t, i, n_docs(), vocab_size_));
    }
    if (width_ == 2) {
      const uint16_t v = static_cast<uint16_t>(t);
      std::memcpy(dst + 2 * i, &v, 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(t);
      std::memcpy(dst + 4 * i, &v, 4);
    }
  }
  n_tokens_ += n;
  offsets_.push_back(n_tokens_);
  return absl::OkStatus();
}

absl::Status ShardWriter::write(const std::string& path) {
  if (hash_.size() > kShardHashBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tokenizer hash '%s' is longer than the %d bytes a shard header holds", path, hash_,
        kShardHashBytes));
  }
  const uint64_t index_off = align8(kShardHeaderSize + payload_.size());
  std::string buf(index_off + 8 * offsets_.size(), '\0');
  std::memcpy(&buf[kOffMagic], kShardMagic, sizeof(kShardMagic));
  put<uint32_t>(buf, kOffVersion, kShardVersion);
  put<uint32_t>(buf, kOffWidth, width_);
  put<uint32_t>(buf, kOffVocab, vocab_size_);
  put<uint32_t>(buf, kOffHeaderSize, kShardHeaderSize);
  put<uint64_t>(buf, kOffTokens, n_tokens_);
  put<uint64_t>(buf, kOffDocs, n_docs());
  put<uint32_t>(buf, kOffPayloadCrc, crc32(payload_.data(), payload_.size()));
  put<uint32_t>(buf, kOffIndexCrc, crc32(offsets_.data(), 8 * offsets_.size()));
  std::memcpy(&buf[kOffHash], hash_.data(), hash_.size());
  put<uint32_t>(buf, kOffHeaderCrc, crc32(buf.data(), kOffHeaderCrc));
  std::memcpy(&buf[kShardHeaderSize], payload_.data(), payload_.size());
  std::memcpy(&buf[index_off], offsets_.data(), 8 * offsets_.size());
  LM_RETURN_IF_ERROR(write_file_atomic(path, buf));
  payload_.clear();
  offsets_.assign(1, 0);
  n_tokens_ = 0;
  return absl::OkStatus();
}

absl::Status write_shard(const std::string& path, const std::vector<int32_t>& tokens,
                         const std::vector<uint64_t>& doc_offsets, uint32_t vocab_size,
                         const std::string& tokenizer_hash) {
  std::vector<uint64_t> offs = doc_offsets;
  if (offs.empty()) offs = {0, tokens.size()};
  if (offs.front() != 0 || offs.back() != tokens.size() || !std::is_sorted(offs.begin(), offs.end())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: document offsets must rise from 0 to the token count %d", path, tokens.size()));
  }
  ShardWriter w(vocab_size, tokenizer_hash);
  for (size_t d = 0; d + 1 < offs.size(); ++d) {
    LM_RETURN_IF_ERROR(w.add_document(tokens.data() + offs[d], offs[d + 1] - offs[d]));
  }
  return w.write(path);
}

namespace {

absl::Status shard_loss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what, " (", kRedo, ")"));
}

// Where the document offsets start: after the header and the tokens, 8-byte aligned.
uint64_t index_offset(const ShardHeader& h) { return align8(kShardHeaderSize + h.n_tokens * h.token_width); }

// The header of the mapped file `p` of `size` bytes, checked field by field and against the size.
absl::StatusOr<ShardHeader> read_shard_header(const std::string& path, const uint8_t* p, uint64_t size) {
  auto loss = [&](const std::string& what) { return shard_loss(path, what); };
  if (size < sizeof(kShardMagic) || std::memcmp(p, kShardMagic, sizeof(kShardMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: magic: not an lmforge token shard (starts with '%s', expected 'LMTOKSH\\x00'); "
        "pass the folder written by 'lmtrain prepare'",
        path, printable(p, std::min<uint64_t>(size, 8))));
  }
  if (size < kShardHeaderSize) {
    return loss(absl::StrFormat("truncated: %d bytes, shorter than the %d-byte header", size,
                                kShardHeaderSize));
  }
  ShardHeader h;
  h.version = get<uint32_t>(p, kOffVersion);
  if (h.version != kShardVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: version: format version %d, this build reads version %d (%s, or use a matching "
        "lmforge build)",
        path, h.version, kShardVersion, kRedo));
  }
  h.header_crc = get<uint32_t>(p, kOffHeaderCrc);
  const uint32_t header_crc = crc32(p, kOffHeaderCrc);
  if (header_crc != h.header_crc) {
    return loss(absl::StrFormat("header_crc: header checksum mismatch (stored %08x, computed %08x): "
                                "the header is corrupt",
                                h.header_crc, header_crc));
  }
  h.token_width = get<uint32_t>(p, kOffWidth);
  h.vocab_size = get<uint32_t>(p, kOffVocab);
  const uint32_t header_size = get<uint32_t>(p, kOffHeaderSize);
  h.n_tokens = get<uint64_t>(p, kOffTokens);
  h.n_docs = get<uint64_t>(p, kOffDocs);
  h.payload_crc = get<uint32_t>(p, kOffPayloadCrc);
  h.index_crc = get<uint32_t>(p, kOffIndexCrc);
  const char* hash = reinterpret_cast<const char*>(p + kOffHash);
  h.tokenizer_hash.assign(hash, strnlen(hash, kShardHashBytes));

  if (header_size != kShardHeaderSize) {
    return loss(absl::StrFormat("header_size: %d, expected %d", header_size, kShardHeaderSize));
  }
  if (h.token_width != 2 && h.token_width != 4) {
    return loss(absl::StrFormat("token_width: %d bytes, expected 2 or 4", h.token_width));
  }
  if (h.vocab_size == 0 || (h.token_width == 2 && h.vocab_size > 65536)) {
    return loss(absl::StrFormat("vocab_size: %d does not fit token width %d", h.vocab_size,
                                h.token_width));
  }
  if (h.n_tokens > (size / h.token_width) || h.n_docs > size / 8) {
    return loss(absl::StrFormat("truncated: header promises %d tokens and %d documents but the file "
                                "is only %d bytes",
                                h.n_tokens, h.n_docs, size));
  }
  const uint64_t index_off = index_offset(h);
  const uint64_t expected = index_off + 8 * (h.n_docs + 1);
  if (size < expected) {
    return loss(absl::StrFormat("truncated: file is %d bytes, its header (%d tokens, %d documents) "
                                "needs %d",
                                size, h.n_tokens, h.n_docs, expected));
  }
  if (size > expected) {
    return loss(absl::StrFormat("size: file is %d bytes, %d more than its header (%d tokens, %d "
                                "documents) describes",
                                size, size - expected, h.n_tokens, h.n_docs));
  }
  return h;
}

// The document offsets: checksum, and 0 = first <= ... <= last = n_tokens.
absl::Status check_shard_index(const std::string& path, const uint8_t* index, const ShardHeader& h) {
  auto loss = [&](const std::string& what) { return shard_loss(path, what); };
  const uint32_t index_crc = crc32(index, 8 * (h.n_docs + 1));
  if (index_crc != h.index_crc) {
    return loss(absl::StrFormat("index_crc: document offset checksum mismatch (stored %08x, "
                                "computed %08x)",
                                h.index_crc, index_crc));
  }
  uint64_t prev = 0;
  for (uint64_t d = 0; d <= h.n_docs; ++d) {
    const uint64_t off = get<uint64_t>(index, 8 * d);
    const bool bad = (d == 0 && off != 0) || off < prev || off > h.n_tokens ||
                     (d == h.n_docs && off != h.n_tokens);
    if (bad) {
      return loss(absl::StrFormat("doc_offsets[%d]: %d is out of order (previous %d, tokens %d)", d,
                                  off, prev, h.n_tokens));
    }
    prev = off;
  }
  return absl::OkStatus();
}

// The token payload: checksum, and every id below vocab_size.
absl::Status check_shard_payload(const std::string& path, const uint8_t* payload, const ShardHeader& h) {
  auto loss = [&](const std::string& what) { return shard_loss(path, what); };
  const uint32_t payload_crc = crc32(payload, h.n_tokens * h.token_width);
  if (payload_crc != h.payload_crc) {
    return loss(absl::StrFormat("payload_crc: token payload checksum mismatch (stored %08x, "
                                "computed %08x): the tokens are corrupt",
                                h.payload_crc, payload_crc));
  }
  uint32_t max_id = 0;
  if (h.token_width == 2) {
    for (uint64_t i = 0; i < h.n_tokens; ++i) max_id = std::max<uint32_t>(max_id, get<uint16_t>(payload, 2 * i));
  } else {
    for (uint64_t i = 0; i < h.n_tokens; ++i) max_id = std::max<uint32_t>(max_id, get<uint32_t>(payload, 4 * i));
  }
  if (h.n_tokens > 0 && max_id >= h.vocab_size) {
    return loss(absl::StrFormat("tokens: id %d is not below vocab_size %d", max_id, h.vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardReader> ShardReader::open(const std::string& path, bool verify_checksum) {
  LM_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::open(path));
  LM_ASSIGN_OR_RETURN(ShardHeader h, read_shard_header(path, mf.data(), mf.size()));
  const uint64_t index_off = index_offset(h);
  LM_RETURN_IF_ERROR(check_shard_index(path, mf.data() + index_off, h));
  if (verify_checksum) LM_RETURN_IF_ERROR(check_shard_payload(path, mf.data() + kShardHeaderSize, h));

  ShardReader r;
  r.path_ = path;
  r.header_ = std::move(h);
  r.width_ = r.header_.token_width;
  r.file_ = std::make_shared<const MappedFile>(std::move(mf));
  r.payload_ = r.file_->data() + kShardHeaderSize;
  r.index_ = r.file_->data() + index_off;
  return r;
}

void ShardReader::copy(uint64_t begin, uint64_t n, int32_t* out) const {
  // An empty read may come with out == nullptr (an empty vector's data()): memcpy's pointers must
  // be valid even for 0 bytes (UBSan: "null pointer passed as argument 1"; tests/fuzz/corpus).
  if (n == 0) return;
  if (width_ == 4) {
    std::memcpy(out, payload_ + 4 * begin, 4 * n);
    return;
  }
  const uint8_t* src = payload_ + 2 * begin;
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    out[i] = v;
  }
}

std::vector<uint64_t> ShardReader::doc_offsets() const {
  std::vector<uint64_t> out(header_.n_docs + 1);
  if (index_ != nullptr) std::memcpy(out.data(), index_, 8 * out.size());
  return out;
}

void ShardReader::prefetch(uint64_t begin, uint64_t n) const {
  if (file_ == nullptr || n == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(payload_ + width_ * begin) & ~(page - 1);
  const auto hi = reinterpret_cast<uintptr_t>(payload_ + width_ * (begin + n));
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_WILLNEED);
}

}  // namespace lm::data
