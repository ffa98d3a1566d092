// Compressed corpora by magic bytes: the same documents from plain, gzip, zstd, bzip2 and xz files
// (whatever their names), multi-stream files, truncation as DataLoss naming the file, and formats
// that are not text refused by name before any line is read.
#include "corpus/decompress.h"
#include "corpus/parquet.h"

#include <bzlib.h>
#include <gtest/gtest.h>
#include <lzma.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>

#include "corpus/corpus.h"

namespace fs = std::filesystem;

namespace {

std::string gzip(const std::string& text) {
  const std::string tmp = (fs::temp_directory_path() / ("dz_" + std::to_string(getpid()) + ".gz")).string();
  gzFile g = gzopen(tmp.c_str(), "wb");
  gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
  gzclose(g);
  std::ifstream f(tmp, std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(f)), {});
  fs::remove(tmp);
  return out;
}
std::string zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  return out;
}
std::string bzip2(const std::string& text) {
  unsigned n = static_cast<unsigned>(text.size() + text.size() / 100 + 600);
  std::string out(n, '\0');
  EXPECT_EQ(BZ2_bzBuffToBuffCompress(out.data(), &n, const_cast<char*>(text.data()),
                                     static_cast<unsigned>(text.size()), 9, 0, 0), BZ_OK);
  out.resize(n);
  return out;
}
std::string xz(const std::string& text) {
  std::string out(lzma_stream_buffer_bound(text.size()), '\0');
  size_t pos = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(text.data()),
                                    text.size(), reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()), LZMA_OK);
  out.resize(pos);
  return out;
}

class DecompressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("decompress_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (int i = 0; i < 3000; ++i) text_ += "দলিল " + std::to_string(i) + " document line\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string put(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  absl::Status read(const std::string& path, std::vector<std::string>* docs) {
    return lm::data::for_each_document_in_file(path, "lines", "text", {}, [&](const std::string& d) {
      docs->push_back(d);
      return absl::OkStatus();
    }, nullptr);
  }
  fs::path dir_;
  std::string text_;
};

TEST_F(DecompressTest, EveryFormatGivesTheSameDocumentsWhateverTheName) {
  std::vector<std::string> plain;
  ASSERT_TRUE(read(put("plain.txt", text_), &plain).ok());
  ASSERT_EQ(plain.size(), 3000u);
  // Named .txt on purpose: the magic bytes decide, not the suffix.
  const std::pair<std::string, std::string> files[] = {
      {"gzip", gzip(text_)}, {"zstd", zstd(text_)}, {"bzip2", bzip2(text_)}, {"xz", xz(text_)}};
  for (const auto& [format, bytes] : files) {
    const std::string p = put(format + ".txt", bytes);
    auto s = lm::data::ByteStream::open(p);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->format(), format);
    std::vector<std::string> docs;
    const absl::Status st = read(p, &docs);
    EXPECT_TRUE(st.ok()) << format << ": " << st;
    EXPECT_EQ(docs, plain) << format;
    auto whole = lm::data::read_decompressed(p);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(*whole, text_) << format;
  }
}

TEST_F(DecompressTest, ConcatenatedStreamsReadAsOne) {  // pbzip2, zstd -T, xz -T, cat a.gz b.gz
  const std::string a = text_.substr(0, text_.size() / 2), b = text_.substr(text_.size() / 2);
  for (auto* enc : {&gzip, &zstd, &bzip2, &xz}) {
    auto whole = lm::data::read_decompressed(put("multi", (*enc)(a) + (*enc)(b)));
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(*whole, text_);
  }
}

TEST_F(DecompressTest, TruncatedFileIsDataLossNamingFileAndFormat) {
  const std::pair<std::string, std::string> files[] = {
      {"gzip", gzip(text_)}, {"zstd", zstd(text_)}, {"bzip2", bzip2(text_)}, {"xz", xz(text_)}};
  for (const auto& [format, bytes] : files) {
    const std::string p = put("cut-" + format, bytes.substr(0, bytes.size() / 2));
    std::vector<std::string> docs;
    const absl::Status st = read(p, &docs);
    ASSERT_FALSE(st.ok()) << format << " truncated read as complete (" << docs.size() << " docs)";
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find(p), std::string::npos) << st;
    EXPECT_NE(st.message().find(format), std::string::npos) << st;
  }
}

TEST_F(DecompressTest, ArchivesAndParquetAreRefusedByName) {
  const std::pair<std::string, std::string> files[] = {
      {"zip archive", std::string("PK\x03\x04", 4) + "rest"},
      {"Parquet", "PAR1" + std::string(20, '\0')},
      {"7-Zip", std::string("7z\xBC\xAF\x27\x1C", 6) + "x"},
      {"LZ4", std::string("\x04\x22\x4D\x18", 4) + "x"}};
  for (const auto& [what, bytes] : files) {
    const std::string p = put("data.jsonl", bytes);
    std::vector<std::string> docs;
    const absl::Status st = read(p, &docs);
    ASSERT_FALSE(st.ok()) << what;
    // A build with Arrow reads Parquet (tests/corpus/parquet_test.cpp): these 24 bytes are a broken one.
    const bool parquet = what == "Parquet" && lm::data::parquet_supported();
    EXPECT_EQ(st.code(), parquet ? absl::StatusCode::kDataLoss : absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
    EXPECT_NE(st.message().find(p), std::string::npos) << st;
    EXPECT_TRUE(docs.empty());
  }
  // Short and empty files are plain text.
  auto e = lm::data::sniff_compression("e", "");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, "plain");
}

}  // namespace

namespace {
TEST_F(DecompressTest, ProgressEstimateOfTheTextSize) {
  EXPECT_EQ(lm::data::estimated_uncompressed_bytes(put("a.gz", gzip(text_))), text_.size());  // ISIZE
  EXPECT_EQ(lm::data::estimated_uncompressed_bytes(put("a.zst", zstd(text_))), text_.size());  // frame header
  EXPECT_EQ(lm::data::estimated_uncompressed_bytes(put("a.txt", text_)), text_.size());
  const uint64_t bz = lm::data::estimated_uncompressed_bytes(put("a.bz2", bzip2(text_)));
  EXPECT_GT(bz, 0u);
  EXPECT_EQ(lm::data::estimated_uncompressed_bytes((dir_ / "missing").string()), 0u);
}
}  // namespace
