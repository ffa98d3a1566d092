// TensorBoard event files: CRC-32C against its published check value, the TFRecord framing read
// back here. TensorBoard's own reader on a run's files: tests/train/tensorboard_client_test.cpp.
#include "core/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/file.h"

namespace lm {
namespace {
namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_tensorboard_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  return p;
}

// Splits a TFRecord file into its records, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& path) {
  auto data = read_file(path);
  EXPECT_TRUE(data.ok()) << data.status();
  std::vector<std::string> out;
  size_t at = 0;
  while (at < data->size()) {
    EXPECT_GE(data->size() - at, 16u) << "torn record at " << at;
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, data->data() + at, 8);
    std::memcpy(&len_crc, data->data() + at + 8, 4);
    EXPECT_EQ(len_crc, masked_crc32c(data->data() + at, 8)) << "length CRC of the record at " << at;
    std::string rec = data->substr(at + 12, n);
    std::memcpy(&data_crc, data->data() + at + 12 + n, 4);
    EXPECT_EQ(data_crc, masked_crc32c(rec.data(), rec.size())) << "data CRC of the record at " << at;
    out.push_back(std::move(rec));
    at += 16 + n;
  }
  return out;
}

TEST(TensorBoard, Crc32cCheckValue) {
  // The CRC catalogue's check value of CRC-32C (iSCSI) over "123456789", and RFC 3720's 32 zero bytes.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(TensorBoard, RecordsAreFramedAndCarryTheValues) {
  const auto dir = fresh("framing");
  auto w = TensorBoardWriter::open(dir.string());
  ASSERT_TRUE(w.ok()) << w.status();
  Json line = {{"step", 10}, {"loss", 3.5}, {"val_loss", {{"bn", 4.25}}}, {"note", "skipped"}};
  ASSERT_TRUE(w->add_metrics(line, 1000.0).ok());
  ASSERT_TRUE(w->add_text("samples", 10, "আমার সোনার বাংলা", 1000.0).ok());
  ASSERT_TRUE(w->flush().ok());
  EXPECT_EQ(fs::path(w->path()).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const auto recs = read_records(w->path());
  ASSERT_EQ(recs.size(), 4u);  // file_version, loss, val_loss/bn, the text; the string field is skipped
  EXPECT_NE(recs[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(recs[1].find("loss"), std::string::npos);
  float loss;  // simple_value is the last 4 bytes of the Value, which ends the record
  std::memcpy(&loss, recs[1].data() + recs[1].size() - 4, 4);
  EXPECT_EQ(loss, 3.5f);
  EXPECT_NE(recs[2].find("val_loss/bn"), std::string::npos);
  EXPECT_NE(recs[3].find("আমার সোনার বাংলা"), std::string::npos);
  EXPECT_NE(recs[3].find("text"), std::string::npos);
}

TEST(TensorBoard, NeverAppendsToAnotherFile) {
  const auto dir = fresh("two");
  auto a = TensorBoardWriter::open(dir.string());
  ASSERT_TRUE(a.ok());
  auto b = TensorBoardWriter::open(dir.string());  // the same second and process: a resume right after a stop
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->path(), b->path());
  EXPECT_LT(a->path(), b->path()) << "TensorBoard reads files in name order: the later start must sort after";
  EXPECT_FALSE(TensorBoardWriter::open("/proc/no/such/dir").ok());
  EXPECT_FALSE(a->add_metrics(Json{{"loss", 1.0}}, 0).ok()) << "a line without a step must be refused";
}

}  // namespace
}  // namespace lm
