// Parquet corpora (corpus/parquet.h): files written here with Arrow C++ itself read back through
// the corpus reader: every non-null value of the column is a document, in row order across row
// groups; nulls are counted and skipped; a missing column or one of another type is an error
// naming the file, the column and its type. Built without Arrow (LM_WITH_PARQUET off) only the
// refusal is checked and the rest is skipped.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "corpus/corpus.h"
#include "corpus/decompress.h"
#include "corpus/parquet.h"
#include "corpus/parquet_rows.h"

#ifdef LM_HAVE_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/writer.h>
#endif

namespace fs = std::filesystem;

namespace {

class ParquetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("parquet_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Reads the manifest `json` (written beside the data) and returns the documents of source 0.
  absl::Status read(const std::string& json, std::vector<std::string>* docs, lm::data::ReadStats* st,
                    lm::data::ReadOptions o = {}) {
    const std::string mp = (dir_ / "corpus.json").string();
    std::ofstream(mp) << json;
    auto m = lm::data::load_manifest(mp);
    if (!m.ok()) return m.status();
    return lm::data::for_each_document(*m, m->sources[0], o, [&](const std::string& d) {
      docs->push_back(d);
      return absl::OkStatus();
    }, st);
  }

#ifdef LM_HAVE_PARQUET
  // A file of columns id (int64), text (string), body (large_string), `rows_per_group` rows per
  // row group; nullopt is a null. Called `name` on purpose without .parquet: magic bytes decide.
  std::string write_parquet(const std::string& name, const std::vector<std::optional<std::string>>& texts,
                            int64_t rows_per_group) {
    arrow::Int64Builder ids;
    arrow::StringBuilder text;
    arrow::LargeStringBuilder body;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_TRUE(ids.Append(static_cast<int64_t>(i)).ok());
      EXPECT_TRUE((texts[i] ? text.Append(*texts[i]) : text.AppendNull()).ok());
      EXPECT_TRUE((texts[i] ? body.Append("body " + *texts[i]) : body.AppendNull()).ok());
    }
    std::shared_ptr<arrow::Array> a, b, c;
    EXPECT_TRUE(ids.Finish(&a).ok() && text.Finish(&b).ok() && body.Finish(&c).ok());
    auto schema = arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8()),
                                 arrow::field("body", arrow::large_utf8())});
    const std::string path = (dir_ / name).string();
    auto out = arrow::io::FileOutputStream::Open(path);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    // zstd as in published corpora (Arrow C++ writes uncompressed by default, pyarrow snappy).
    const auto props = parquet::WriterProperties::Builder().compression(parquet::Compression::ZSTD)->build();
    const arrow::Status st = parquet::arrow::WriteTable(*arrow::Table::Make(schema, {a, b, c}),
                                                        arrow::default_memory_pool(), *out, rows_per_group, props);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE((*out)->Close().ok());
    return path;
  }
#endif

  fs::path dir_;
};

TEST_F(ParquetTest, WithoutArrowTheRefusalNamesTheBuildOption) {
  if (lm::data::parquet_supported()) GTEST_SKIP() << "built with Arrow (LM_WITH_PARQUET)";
  std::ofstream(dir_ / "d.parquet", std::ios::binary) << "PAR1" << std::string(20, '\0') << "PAR1";
  std::vector<std::string> docs;
  const absl::Status st = read(R"({"sources":[{"paths":["d.parquet"],"lang":"en"}]})", &docs, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("no Parquet support (LM_WITH_PARQUET)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("d.parquet"), std::string::npos) << st;
}

#ifdef LM_HAVE_PARQUET

TEST_F(ParquetTest, RowsInOrderAcrossRowGroupsNullsSkippedAndCounted) {
  // 7 rows in row groups of 3: one null in the first group, one in the last; an empty string is a
  // document that the reader drops as empty, like an empty line.
  write_parquet("part-0.bin", {"এক", std::nullopt, "two", "", "three", "four", std::nullopt}, 3);
  std::vector<std::string> docs;
  lm::data::ReadStats st;
  ASSERT_TRUE(read(R"({"sources":[{"paths":["part-0.bin"],"format":"jsonl","lang":"en"}]})", &docs, &st).ok());
  EXPECT_EQ(docs, (std::vector<std::string>{"এক", "two", "three", "four"}));
  EXPECT_EQ(st.nulls_skipped, 2);
  EXPECT_EQ(st.empty_dropped, 1);
  EXPECT_EQ(st.documents, 4);
  // The counts of the file itself.
  auto counts = lm::data::for_each_parquet_value((dir_ / "part-0.bin").string(), "text",
                                                 [](std::string_view, int64_t) { return absl::OkStatus(); });
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->rows, 7);
  EXPECT_EQ(counts->nulls, 2);
  EXPECT_EQ(counts->row_groups, 3);
}

TEST_F(ParquetTest, ColumnChoosesALargeStringColumn) {
  write_parquet("d.parquet", {"a", std::nullopt, "b"}, 2);
  std::vector<std::string> docs;
  lm::data::ReadStats st;
  ASSERT_TRUE(read(R"({"sources":[{"paths":["d.parquet"],"column":"body","lang":"en"}]})", &docs, &st).ok());
  EXPECT_EQ(docs, (std::vector<std::string>{"body a", "body b"}));
  EXPECT_EQ(st.nulls_skipped, 1);
}

TEST_F(ParquetTest, WrongTypeOrMissingColumnNamesFileColumnAndType) {
  const std::string path = write_parquet("d.parquet", {"a"}, 1);
  std::vector<std::string> docs;
  absl::Status st = read(R"({"sources":[{"paths":["d.parquet"],"column":"id","lang":"en"}]})", &docs, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(path + ": column 'id' is of type int64"), std::string::npos) << st;
  st = read(R"({"sources":[{"paths":["d.parquet"],"column":"content","lang":"en"}]})", &docs, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("no column 'content' (it has: id, text, body"), std::string::npos) << st;
  EXPECT_TRUE(docs.empty());
}

TEST_F(ParquetTest, InvalidUtf8NamesTheRowOrIsSkippedAndCounted) {
  write_parquet("d.parquet", {"ok", std::string("bad \xC3(", 6), "fine"}, 2);
  std::vector<std::string> docs;
  const std::string json = R"({"sources":[{"paths":["d.parquet"],"lang":"en"}]})";
  absl::Status st = read(json, &docs, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("d.parquet: row 1 of column 'text': invalid UTF-8 at byte 4"), std::string::npos) << st;
  docs.clear();
  lm::data::ReadStats stats;
  lm::data::ReadOptions skip;
  skip.skip_invalid_utf8 = true;
  ASSERT_TRUE(read(json, &docs, &stats, skip).ok());
  EXPECT_EQ(docs, (std::vector<std::string>{"ok", "fine"}));
  EXPECT_EQ(stats.invalid_skipped, 1);
}

TEST_F(ParquetTest, TruncatedFileIsDataLoss) {
  const std::string path = write_parquet("d.parquet", {"a", "b", "c"}, 2);
  fs::resize_file(path, fs::file_size(path) / 2);  // still starts with PAR1, the footer is gone
  std::vector<std::string> docs;
  const absl::Status st = read(R"({"sources":[{"paths":["d.parquet"],"lang":"en"}]})", &docs, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(path + ": cannot read as Parquet"), std::string::npos) << st;
}

TEST_F(ParquetTest, ProgressTotalIsTheUncompressedSizeFromTheFooter) {
  // prepare's progress total: the footer's uncompressed size, not the (compressed) file size. The
  // rows are distinct (text corpora are; a column of repeats would be dictionary-encoded, and the
  // footer counts encoded bytes) and compressible.
  std::vector<std::optional<std::string>> texts;
  uint64_t text_bytes = 0;
  for (int i = 0; i < 2000; ++i) {
    texts.push_back("the same sentence again and again, and once more the same sentence, row " + std::to_string(i));
    text_bytes += texts.back()->size();
  }
  const std::string path = write_parquet("d.parquet", texts, 500);
  const uint64_t estimate = lm::data::estimated_uncompressed_bytes(path);
  EXPECT_GE(estimate, text_bytes);
  EXPECT_GT(estimate, 2 * fs::file_size(path)) << "the file is compressed; the estimate is not its size";
  EXPECT_EQ(lm::data::parquet_uncompressed_bytes((dir_ / "missing").string()), 0u);
}

TEST_F(ParquetTest, StopReadingEndsEarlyWithoutError) {
  write_parquet("d.parquet", {"a", "b", "c", "d"}, 1);
  const std::string mp = (dir_ / "corpus.json").string();
  std::ofstream(mp) << R"({"sources":[{"paths":["d.parquet"],"lang":"en"}]})";
  auto m = lm::data::load_manifest(mp);
  ASSERT_TRUE(m.ok()) << m.status();
  int seen = 0;
  const absl::Status st = lm::data::for_each_document(*m, m->sources[0], {}, [&](const std::string&) {
    return ++seen == 2 ? lm::data::stop_reading() : absl::OkStatus();
  }, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(seen, 2);
}

#endif  // LM_HAVE_PARQUET

// ---- whole rows as JSON (corpus/parquet_rows.h): files written by pyarrow, expected values from
// pyarrow's to_pylist (what `datasets` hands lm-eval), tests/corpus/parquet_rows_fixtures.py ----

class ParquetRowsTest : public ParquetTest {
 protected:
  // Runs the fixture script into dir_; false (and the test skipped) without pyarrow.
  bool fixtures() {
    const std::string cmd = std::string(LM_TEST_PYTHON) + " " + LM_SOURCE_DIR + "/tests/corpus/parquet_rows_fixtures.py " +
                            dir_.string() + " > " + (dir_ / "fixtures.log").string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    EXPECT_TRUE(code == 0 || code == 77) << "parquet_rows_fixtures.py exit " << code;
    return code == 0;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
};

TEST_F(ParquetRowsTest, WithoutArrowTheRefusalNamesTheBuildOptionAndAConversion) {
  if (lm::data::parquet_supported()) GTEST_SKIP() << "built with Arrow (LM_WITH_PARQUET)";
  std::ofstream(dir_ / "d.parquet", std::ios::binary) << "PAR1" << std::string(20, '\0') << "PAR1";
  const auto rows = lm::data::read_parquet_rows(path("d.parquet"));
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument) << rows.status();
  EXPECT_NE(rows.status().message().find("d.parquet: this is a Parquet file, but this build has no Parquet support "
                                         "(LM_WITH_PARQUET)"), std::string::npos) << rows.status();
  EXPECT_NE(rows.status().message().find("to_pylist()"), std::string::npos) << rows.status();
}

// Every row equals pyarrow's to_pylist of it, value by value and kind by kind: dump() tells 1 from
// 1.0 and "1" (nlohmann's == would call 1 and 1.0 equal).
TEST_F(ParquetRowsTest, EveryTypeConvertsAsPyarrowToPylist) {
  if (!lm::data::parquet_supported()) GTEST_SKIP() << "no Parquet support in this build";
  if (!fixtures()) GTEST_SKIP() << LM_TEST_PYTHON << " has no pyarrow";
  auto rows = lm::data::read_parquet_rows(path("types.parquet"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::ifstream in(path("types.jsonl"));
  std::vector<lm::Json> want;
  for (std::string line; std::getline(in, line);) want.push_back(lm::Json::parse(line));
  ASSERT_EQ(rows->size(), 5u);
  ASSERT_EQ(rows->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ((*rows)[i].size(), want[i].size()) << "row " << i;
    for (const auto& [key, value] : want[i].items())
      EXPECT_EQ((*rows)[i].at(key).dump(), value.dump()) << "row " << i << " column " << key;
  }
  // The kinds the harness's Jinja and target_index tell apart.
  const lm::Json& r0 = (*rows)[0];
  EXPECT_TRUE(r0["i8"].is_number_integer());
  EXPECT_TRUE(r0["f64"].is_number_float());
  EXPECT_EQ(r0["f32"].get<double>(), static_cast<double>(0.1f));  // widened exactly, as Python's float()
  EXPECT_TRUE((*rows)[1]["u64"].is_number_unsigned());
  EXPECT_EQ((*rows)[1]["u64"].get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ((*rows)[0]["i64"].get<int64_t>(), INT64_MIN);
  EXPECT_TRUE((*rows)[2]["text"].is_null());
  EXPECT_TRUE((*rows)[0]["choices"].is_object());
  EXPECT_EQ((*rows)[0]["category"], "STEM");  // dictionary-encoded
  // for_each_parquet_row counts over the row groups (2 + 2 + 1 rows).
  int64_t last = -1;
  auto n = lm::data::for_each_parquet_row(path("types.parquet"), [&](lm::Json&&, int64_t index) {
    EXPECT_EQ(index, last + 1);
    last = index;
    return absl::OkStatus();
  });
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5);
}

TEST_F(ParquetRowsTest, BytesAndOtherTypesNameFileColumnAndType) {
  if (!lm::data::parquet_supported()) GTEST_SKIP() << "no Parquet support in this build";
  if (!fixtures()) GTEST_SKIP() << LM_TEST_PYTHON << " has no pyarrow";
  for (const auto& [file, expect] : std::vector<std::pair<std::string, std::string>>{
           {"binary.parquet", "binary.parquet: column 'blob' is of type binary, bytes rather than UTF-8 text"},
           {"nested_binary.parquet", "nested_binary.parquet: column 'meta.raw[]' is of type binary"},
           {"timestamp.parquet", "timestamp.parquet: column 'when' is of type timestamp[ms], which has no JSON value"}}) {
    const auto rows = lm::data::read_parquet_rows(path(file));
    EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument) << rows.status();
    EXPECT_NE(rows.status().message().find(expect), std::string::npos) << rows.status();
  }
}

TEST_F(ParquetRowsTest, CorruptOrTruncatedFileIsDataLossNamingTheFile) {
  if (!lm::data::parquet_supported()) GTEST_SKIP() << "no Parquet support in this build";
  if (!fixtures()) GTEST_SKIP() << LM_TEST_PYTHON << " has no pyarrow";
  std::ifstream in(path("types.parquet"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(path("cut.parquet"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::string flipped = bytes;  // the data pages garbled, footer and magic intact
  for (size_t i = 4; i < bytes.size() / 2; ++i) flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
  std::ofstream(path("flipped.parquet"), std::ios::binary) << flipped;
  for (const char* file : {"cut.parquet", "flipped.parquet"}) {
    const auto rows = lm::data::read_parquet_rows(path(file));
    EXPECT_EQ(rows.status().code(), absl::StatusCode::kDataLoss) << file << ": " << rows.status();
    EXPECT_NE(rows.status().message().find(std::string(file) + ": cannot read as Parquet"), std::string::npos)
        << rows.status();
  }
}

}  // namespace
