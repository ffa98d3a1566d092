#include "corpus/decompress.h"

#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "corpus/parquet.h"

namespace lm::data {
namespace {

bool starts(std::string_view head, std::string_view magic) { return head.substr(0, magic.size()) == magic; }

// Formats seen in corpus downloads that are not text streams: named so the user knows what to do.
struct Foreign {
  std::string_view magic, name, hint;
};
constexpr Foreign kForeign[] = {
    {"PK\x03\x04", "a zip archive", "unzip it and list the files it holds"},
    {"7z\xBC\xAF\x27\x1C", "a 7-Zip archive", "extract it (7z x) and list the files it holds"},
    {"\x04\x22\x4D\x18", "an LZ4 frame", "decompress it (lz4 -d) or recompress with zstd"},
    // Corpus sources read Parquet by column (corpus/parquet.h); a text stream (a benchmark file) cannot.
    {"PAR1", "a Parquet file",
     "list it as a corpus.json source (read by column when built with LM_WITH_PARQUET), or export its text "
     "column to .jsonl (e.g. with pyarrow or duckdb) and read that"},
    {"\x89HDF", "an HDF5 file", "export the text to .jsonl or .txt"},
};

// Reads compressed bytes from the file in blocks; each decoder pulls from it.
class FileIn {
 public:
  explicit FileIn(std::FILE* f) : f_(f), buf_(1 << 17) {}
  ~FileIn() { std::fclose(f_); }
  // Refills when empty; false at end of file (check failed()).
  bool fill() {
    if (pos_ < len_) return true;
    len_ = std::fread(buf_.data(), 1, buf_.size(), f_);
    pos_ = 0;
    return len_ > 0;
  }
  bool failed() const { return std::ferror(f_) != 0; }
  const uint8_t* data() const { return buf_.data() + pos_; }
  size_t available() const { return len_ - pos_; }
  void consume(size_t n) { pos_ += n; }

 private:
  std::FILE* f_;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, len_ = 0;
};

class PlainOrGzip : public ByteStream {  // zlib's gz* reads plain files through unchanged
 public:
  PlainOrGzip(gzFile gz, std::string format) : gz_(gz) {
    format_ = std::move(format);
    gzbuffer(gz_, 1 << 17);
  }
  ~PlainOrGzip() override { gzclose(gz_); }
  int64_t read(char* buf, size_t size) override {
    const int n = gzread(gz_, buf, static_cast<unsigned>(size));
    int errnum = Z_OK;
    const char* msg = gzerror(gz_, &errnum);
    // A truncated gzip stream ends with n == 0 and Z_BUF_ERROR ("unexpected end of file").
    if (n < 0 || (n == 0 && errnum != Z_OK && errnum != Z_STREAM_END)) {
      error_ = msg ? msg : "read error";
      return -1;
    }
    return n;
  }

 private:
  gzFile gz_;
};

class Zstd : public ByteStream {
 public:
  explicit Zstd(std::FILE* f) : in_(f), ctx_(ZSTD_createDStream()) { format_ = "zstd"; }
  ~Zstd() override { ZSTD_freeDStream(ctx_); }
  int64_t read(char* buf, size_t size) override {
    ZSTD_outBuffer out{buf, size, 0};
    while (out.pos == 0) {
      if (!in_.fill()) {
        if (in_.failed()) return fail("read error");
        return pending_ ? fail("unexpected end of file (truncated .zst?)") : 0;
      }
      ZSTD_inBuffer in{in_.data(), in_.available(), 0};
      const size_t rc = ZSTD_decompressStream(ctx_, &out, &in);
      in_.consume(in.pos);
      if (ZSTD_isError(rc)) return fail(ZSTD_getErrorName(rc));
      pending_ = rc != 0;  // 0: a frame ended exactly here
    }
    return static_cast<int64_t>(out.pos);
  }

 private:
  FileIn in_;
  ZSTD_DStream* ctx_;
  bool pending_ = false;
};

class Bzip2 : public ByteStream {
 public:
  explicit Bzip2(std::FILE* f) : in_(f) {
    format_ = "bzip2";
    ok_ = BZ2_bzDecompressInit(&s_, 0, 0) == BZ_OK;
  }
  ~Bzip2() override {
    if (ok_) BZ2_bzDecompressEnd(&s_);
  }
  int64_t read(char* buf, size_t size) override {
    if (!ok_) return fail("BZ2_bzDecompressInit failed");
    s_.next_out = buf;
    s_.avail_out = static_cast<unsigned>(size);
    while (s_.avail_out == size) {
      if (ended_) {  // concatenated streams (pbzip2, lbzip2) restart the decoder
        if (!in_.fill()) return in_.failed() ? fail("read error") : 0;
        BZ2_bzDecompressEnd(&s_);
        if (BZ2_bzDecompressInit(&s_, 0, 0) != BZ_OK) return fail("BZ2_bzDecompressInit failed");
        s_.next_out = buf;
        s_.avail_out = static_cast<unsigned>(size);
        ended_ = false;
      }
      if (!in_.fill()) return fail(in_.failed() ? "read error" : "unexpected end of file (truncated .bz2?)");
      s_.next_in = reinterpret_cast<char*>(const_cast<uint8_t*>(in_.data()));
      s_.avail_in = static_cast<unsigned>(in_.available());
      const int rc = BZ2_bzDecompress(&s_);
      in_.consume(in_.available() - s_.avail_in);
      if (rc == BZ_STREAM_END) ended_ = true;
      else if (rc != BZ_OK) return fail("corrupt bzip2 data");
    }
    return static_cast<int64_t>(size - s_.avail_out);
  }

 private:
  FileIn in_;
  bz_stream s_{};
  bool ok_ = false, ended_ = false;
};

class Xz : public ByteStream {
 public:
  explicit Xz(std::FILE* f) : in_(f) {
    format_ = "xz";
    // LZMA_CONCATENATED: xz files of several streams (pixz, xz -T) read as one.
    ok_ = lzma_stream_decoder(&s_, UINT64_MAX, LZMA_CONCATENATED) == LZMA_OK;
  }
  ~Xz() override { lzma_end(&s_); }
  int64_t read(char* buf, size_t size) override {
    if (!ok_) return fail("lzma_stream_decoder failed");
    if (done_) return 0;
    s_.next_out = reinterpret_cast<uint8_t*>(buf);
    s_.avail_out = size;
    while (s_.avail_out == size) {
      lzma_action action = LZMA_RUN;
      if (in_.fill()) {
        s_.next_in = in_.data();
        s_.avail_in = in_.available();
      } else {
        if (in_.failed()) return fail("read error");
        action = LZMA_FINISH;  // tells a concatenated decoder the input is over
        s_.avail_in = 0;
      }
      const size_t before = s_.avail_in;
      const lzma_ret rc = lzma_code(&s_, action);
      in_.consume(before - s_.avail_in);
      if (rc == LZMA_STREAM_END) {
        done_ = true;
        break;
      }
      if (rc != LZMA_OK) return fail(rc == LZMA_BUF_ERROR ? "unexpected end of file (truncated .xz?)" : "corrupt xz data");
    }
    return static_cast<int64_t>(size - s_.avail_out);
  }

 private:
  FileIn in_;
  lzma_stream s_ = LZMA_STREAM_INIT;
  bool ok_ = false, done_ = false;
};

}  // namespace

absl::StatusOr<std::string> sniff_compression(std::string_view path, std::string_view head) {
  if (starts(head, "\x1F\x8B")) return std::string("gzip");
  if (starts(head, "\x28\xB5\x2F\xFD")) return std::string("zstd");
  if (starts(head, "BZh") && head.size() > 3 && head[3] >= '1' && head[3] <= '9') return std::string("bzip2");
  if (starts(head, std::string_view("\xFD\x37\x7A\x58\x5A\x00", 6))) return std::string("xz");
  for (const auto& f : kForeign) {
    if (starts(head, f.magic))
      return absl::InvalidArgumentError(std::string(path) + ": this is " + std::string(f.name) + ", not text: " +
                                        std::string(f.hint) +
                                        " (lmforge reads plain text and gzip, zstd, bzip2 or xz of it)");
  }
  return std::string("plain");
}

absl::StatusOr<std::unique_ptr<ByteStream>> ByteStream::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  char head[8] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  auto kind = sniff_compression(path, std::string_view(head, n));
  if (!kind.ok()) {
    std::fclose(f);
    return kind.status();
  }
  if (*kind == "gzip" || *kind == "plain") {
    std::fclose(f);
    gzFile gz = gzopen(path.c_str(), "rb");
    if (!gz) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    return std::unique_ptr<ByteStream>(new PlainOrGzip(gz, *kind));
  }
  std::rewind(f);
  if (*kind == "zstd") return std::unique_ptr<ByteStream>(new Zstd(f));
  if (*kind == "bzip2") return std::unique_ptr<ByteStream>(new Bzip2(f));
  return std::unique_ptr<ByteStream>(new Xz(f));
}

uint64_t estimated_uncompressed_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return 0;
  uint8_t head[18] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fseek(f, 0, SEEK_END);
  const uint64_t size = static_cast<uint64_t>(std::max<long>(std::ftell(f), 0));
  uint8_t tail[4] = {};
  const bool have_tail = size >= 18 && std::fseek(f, -4, SEEK_END) == 0 && std::fread(tail, 1, 4, f) == 4;
  std::fclose(f);
  const std::string_view head_view(reinterpret_cast<const char*>(head), n);
  if (is_parquet(head_view)) return std::max(parquet_uncompressed_bytes(path), size);
  auto kind = sniff_compression(path, head_view);
  if (!kind.ok() || *kind == "plain") return size;
  if (*kind == "gzip") {
    const uint64_t isize = tail[0] | (tail[1] << 8) | (tail[2] << 16) | (static_cast<uint64_t>(tail[3]) << 24);
    return have_tail ? std::max(isize, size) : size;
  }
  if (*kind == "zstd") {
    const unsigned long long c = ZSTD_getFrameContentSize(head, n);
    if (c != ZSTD_CONTENTSIZE_UNKNOWN && c != ZSTD_CONTENTSIZE_ERROR) return std::max<uint64_t>(c, size);
    return size * 4;
  }
  return *kind == "bzip2" ? size * 9 / 2 : size * 5;
}

absl::StatusOr<std::string> read_decompressed(const std::string& path) {
  LM_ASSIGN_OR_RETURN(auto in, ByteStream::open(path));
  std::string out;
  std::vector<char> buf(1 << 16);
  while (true) {
    const int64_t n = in->read(buf.data(), buf.size());
    if (n < 0)
      return absl::DataLossError(absl::StrCat(path, ": cannot read (", in->format(), "): ", in->error()));
    if (n == 0) return out;
    out.append(buf.data(), static_cast<size_t>(n));
  }
}

}  // namespace lm::data
