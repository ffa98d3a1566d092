// libFuzzer target: the token shard reader (data/shard.cpp, ShardReader::open) on arbitrary bytes.
// Byte 0 of the input picks the mode, the rest is the file:
//   bit 0: before writing, repair the three CRCs (payload, index, header) the way ShardWriter
//          computes them, so mutations get past the checksums to the size/offset checks;
//          without it the fuzzer mostly exercises the checksum rejections.
//   bit 1: open with verify_checksum = false (the sampler's fast path).
// A successful open is followed by reads of every token, the offsets, copy() and prefetch(),
// so an accepted header that lies about sizes shows up as an out-of-bounds read under ASan.
#include <cstring>
#include <vector>

#include "core/file.h"
#include "data/shard.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

template <class T>
T get(const std::string& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}
template <class T>
void put(std::string& b, size_t off, T v) {
  std::memcpy(&b[off], &v, sizeof(T));
}

// Offsets from docs/data.md ("Token shard format"); repairs only what the header makes addressable.
void repair_crcs(std::string& b) {
  if (b.size() < lm::data::kShardHeaderSize) return;
  const uint32_t width = get<uint32_t>(b, 12);
  const uint64_t n_tokens = get<uint64_t>(b, 24), n_docs = get<uint64_t>(b, 32);
  const uint64_t hdr = lm::data::kShardHeaderSize;
  if ((width == 2 || width == 4) && n_tokens <= (b.size() - hdr) / width) {
    const uint64_t payload = n_tokens * width;
    put<uint32_t>(b, 40, lm::crc32(reinterpret_cast<const uint8_t*>(b.data()) + hdr, payload));
    const uint64_t index_off = (hdr + payload + 7) & ~uint64_t{7};
    if (index_off <= b.size() && n_docs < (b.size() - index_off) / 8) {
      put<uint32_t>(b, 44, lm::crc32(reinterpret_cast<const uint8_t*>(b.data()) + index_off,
                                     8 * (n_docs + 1)));
    }
  }
  put<uint32_t>(b, 124, lm::crc32(reinterpret_cast<const uint8_t*>(b.data()), 124));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static lm::fuzz::ScratchFile file(".lmtok");
  const uint8_t mode = data[0];
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (mode & 1) repair_crcs(bytes);
  auto r = lm::data::ShardReader::open(file.write(bytes.data(), bytes.size()), (mode & 2) == 0);
  if (!r.ok()) return 0;
  const lm::data::ShardReader& s = *r;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < s.size(); ++i) sum += static_cast<uint32_t>(s.token(i));
  std::vector<int32_t> out(s.size());
  s.copy(0, s.size(), out.data());
  for (uint64_t off : s.doc_offsets()) sum += off;
  s.prefetch(0, s.size());
  // Keep the reads from being optimised away.
  if (sum == 0x5eed5eed5eedULL) std::fputc('.', stderr);
  return 0;
}
