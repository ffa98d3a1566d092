// libFuzzer target: the corpus text readers (corpus/corpus.cpp, for_each_document_in_file: the
// line reader over zlib, UTF-8 validation, NFC, paragraphs, JSONL). Byte 0 picks the mode,
// the rest is the file:
//   bits 0-1: format, lines | paragraphs | jsonl | jsonl with text_field "body"
//   bit 2:    gzip-compress the bytes before writing (exercises the .gz path with valid
//             streams; without it gzopen reads the bytes as they are, and a fuzzed gzip
//             header exercises the corrupt-stream errors)
//   bit 3:    skip_invalid_utf8;  bit 4: dedup
// Every document handed to the callback must be valid UTF-8 (the reader's contract).
#include <zlib.h>

#include <cstdlib>
#include <string>

#include "corpus/corpus.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string gzip(const std::string& in) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::string out(deflateBound(&z, in.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static lm::fuzz::ScratchFile file(".txt");
  const uint8_t mode = data[0];
  static const char* kFormats[] = {"lines", "paragraphs", "jsonl", "jsonl"};
  const std::string format = kFormats[mode & 3];
  const std::string field = (mode & 3) == 3 ? "body" : "text";
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (mode & 4) bytes = gzip(bytes);
  lm::data::ReadOptions opt;
  opt.skip_invalid_utf8 = (mode & 8) != 0;
  opt.dedup = (mode & 16) != 0;
  lm::data::ReadStats stats;
  (void)lm::data::for_each_document_in_file(
      file.write(bytes.data(), bytes.size()), format, field, opt,
      [](const std::string& doc) {
        if (!lm::data::is_valid_utf8(doc)) std::abort();
        return absl::OkStatus();
      },
      &stats);
  return 0;
}
