// Token shard format: round trip, and each kind of damage gives its own clear error.
#include <sys/wait.h>

#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/file.h"
#include "data/shard.h"
#include "data/shard_set.h"
#include "tests/data/test_util.h"

namespace lm::data {
namespace {

using testing::TempDir;

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

// Writes a small valid shard and returns its path.
std::string write_small(const TempDir& dir, const std::string& name = "a.lmtok", uint32_t vocab = 1000) {
  auto tokens = random_tokens(1000, static_cast<int32_t>(vocab), 7);
  std::vector<uint64_t> offs = {0, 10, 10, 400, 999, 1000};  // includes an empty document
  EXPECT_TRUE(write_shard(dir.file(name), tokens, offs, vocab, testing::kTestHash).ok());
  return dir.file(name);
}

void flip_byte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

void round_trip(uint32_t vocab, uint32_t expected_width) {
  TempDir dir;
  auto tokens = random_tokens(5000, static_cast<int32_t>(vocab), 42);
  tokens[0] = static_cast<int32_t>(vocab - 1);  // the largest id must survive the width
  std::vector<uint64_t> offs = {0, 1, 17, 17, 2500, 4999, 5000};
  LM_ASSERT_OK(write_shard(dir.file("rt.lmtok"), tokens, offs, vocab, "hash-abc"));
  auto r = ShardReader::open(dir.file("rt.lmtok"));
  LM_ASSERT_OK(r.status());
  EXPECT_EQ(r->header().token_width, expected_width);
  EXPECT_EQ(r->header().vocab_size, vocab);
  EXPECT_EQ(r->header().tokenizer_hash, "hash-abc");
  EXPECT_EQ(r->header().n_tokens, tokens.size());
  EXPECT_EQ(r->header().n_docs, offs.size() - 1);
  ASSERT_EQ(r->size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(r->token(i), tokens[i]) << "at " << i;
  std::vector<int32_t> part(300);
  r->copy(1234, part.size(), part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), tokens.begin() + 1234));
  EXPECT_EQ(r->doc_offsets(), offs);
}

TEST(Shard, RoundTrip16Bit) { round_trip(32000, 2); }
TEST(Shard, RoundTrip16BitFullRange) { round_trip(65536, 2); }
TEST(Shard, RoundTrip32Bit) { round_trip(100000, 4); }

TEST(Shard, WriterIsIncrementalAndResets) {
  TempDir dir;
  ShardWriter w(50, "h");
  LM_ASSERT_OK(w.add_document({1, 2, 3}));
  LM_ASSERT_OK(w.add_document({4, 0}));
  EXPECT_EQ(w.n_tokens(), 5u);
  EXPECT_EQ(w.n_docs(), 2u);
  LM_ASSERT_OK(w.write(dir.file("one.lmtok")));
  EXPECT_EQ(w.n_tokens(), 0u);
  LM_ASSERT_OK(w.add_document({9}));
  LM_ASSERT_OK(w.write(dir.file("two.lmtok")));
  auto a = ShardReader::open(dir.file("one.lmtok"));
  auto b = ShardReader::open(dir.file("two.lmtok"));
  LM_ASSERT_OK(a.status());
  LM_ASSERT_OK(b.status());
  EXPECT_EQ(a->doc_offsets(), (std::vector<uint64_t>{0, 3, 5}));
  EXPECT_EQ(b->size(), 1u);
  EXPECT_EQ(b->token(0), 9);
  // No temp file is left behind by the atomic write.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
}

TEST(Shard, WriterRejectsIdOutsideVocab) {
  ShardWriter w(10, "h");
  absl::Status st = w.add_document({1, 10});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary [0, 10)"), std::string::npos) << st.message();
  EXPECT_EQ(w.n_tokens(), 0u);
}

TEST(Shard, FlippedPayloadByteIsChecksumError) {
  TempDir dir;
  const std::string p = write_small(dir);
  flip_byte(p, kShardHeaderSize + 101);
  auto r = ShardReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("payload_crc"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  // Without verification the damage is not looked for: that is what the flag trades away.
  EXPECT_TRUE(ShardReader::open(p, /*verify_checksum=*/false).ok());
}

TEST(Shard, FlippedHeaderByteIsHeaderChecksumError) {
  TempDir dir;
  const std::string p = write_small(dir);
  flip_byte(p, 24);  // n_tokens
  auto r = ShardReader::open(p, /*verify_checksum=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("header_crc"), std::string::npos) << r.status().message();
}

TEST(Shard, FlippedIndexByteIsIndexChecksumError) {
  TempDir dir;
  const std::string p = write_small(dir);
  const auto size = std::filesystem::file_size(p);
  flip_byte(p, size - 12);
  auto r = ShardReader::open(p, /*verify_checksum=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("index_crc"), std::string::npos) << r.status().message();
}

TEST(Shard, TruncatedFileSaysTruncated) {
  TempDir dir;
  const std::string p = write_small(dir);
  const auto size = std::filesystem::file_size(p);
  std::filesystem::resize_file(p, size - 100);
  auto r = ShardReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("truncated: file is"), std::string::npos) << r.status().message();
  // Cut inside the header too.
  std::filesystem::resize_file(p, 60);
  r = ShardReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shorter than the 128-byte header"), std::string::npos)
      << r.status().message();
}

TEST(Shard, TrailingBytesAreAnError) {
  TempDir dir;
  const std::string p = write_small(dir);
  std::ofstream(p, std::ios::app | std::ios::binary) << "junk";
  auto r = ShardReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("4 more than its header"), std::string::npos) << r.status().message();
}

TEST(Shard, WrongMagicSaysNotAShard) {
  TempDir dir;
  const std::string p = write_small(dir);
  flip_byte(p, 2);
  auto r = ShardReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("magic: not an lmforge token shard"), std::string::npos)
      << r.status().message();
  // A text file is not a shard either, whatever its length.
  LM_ASSERT_OK(write_file_atomic(dir.file("t.lmtok"), "hi"));
  r = ShardReader::open(dir.file("t.lmtok"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().message();
}

TEST(Shard, MissingFileIsNotFound) {
  auto r = ShardReader::open("/nonexistent/x.lmtok");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardSet, VocabAndHashMismatchNameShardAndBothValues) {
  TempDir dir;
  LM_ASSERT_OK(testing::write_synthetic_set(dir.path(), {{"bn", "train", testing::iota_tokens(500), {}}}, 32000));
  auto set = ShardSet::open(dir.path());
  LM_ASSERT_OK(set.status());
  LM_ASSERT_OK(set->check_tokenizer(testing::kTestHash, 32000));
  absl::Status st = set->check_tokenizer(testing::kTestHash, 48000);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("bn.train.0.lmtok: vocab_size: shard has vocab 32000 but the run's "
                              "tokenizer has 48000"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("re-run 'lmtrain prepare'"), std::string::npos) << st.message();
  st = set->check_tokenizer("fedcba9876543210", 32000);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("tokenizer_hash: shard was made with tokenizer 0123456789abcdef but the "
                              "run's tokenizer is fedcba9876543210"),
            std::string::npos)
      << st.message();
}

TEST(ShardSet, OpenChecksShardsAgainstManifest) {
  TempDir dir;
  LM_ASSERT_OK(testing::write_synthetic_set(dir.path(),
                                            {{"bn", "train", testing::iota_tokens(500), {}},
                                             {"en", "val", testing::iota_tokens(300), {0, 100, 300}}},
                                            1000, {{"bn", 2.0}}));
  auto set = ShardSet::open(dir.path());
  LM_ASSERT_OK(set.status());
  EXPECT_EQ(set->languages("train"), std::vector<std::string>{"bn"});
  EXPECT_EQ(set->languages("val"), std::vector<std::string>{"en"});
  EXPECT_EQ(set->tokens("bn", "train"), 500u);
  EXPECT_EQ(set->tokens("en", "val"), 300u);
  EXPECT_EQ(set->weights().at("bn"), 2.0);
  ASSERT_EQ(set->datasets().size(), 2u);

  // A shard overwritten by another prepare run no longer matches the manifest's counts.
  LM_ASSERT_OK(write_shard(dir.file("en.val.1.lmtok"), testing::iota_tokens(200), {}, 1000, testing::kTestHash));
  auto bad = ShardSet::open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("n_tokens: shard header has 200"), std::string::npos)
      << bad.status().message();

  // A corrupt shard makes the whole set fail on open, naming the shard.
  LM_ASSERT_OK(testing::write_synthetic_set(dir.path(), {{"bn", "train", testing::iota_tokens(500), {}}}, 1000));
  flip_byte(dir.file("bn.train.0.lmtok"), kShardHeaderSize + 3);
  bad = ShardSet::open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bn.train.0.lmtok: payload_crc"), std::string::npos)
      << bad.status().message();
}

TEST(ShardSet, ManifestIsStrict) {
  TempDir dir;
  LM_ASSERT_OK(testing::write_synthetic_set(dir.path(), {{"bn", "train", testing::iota_tokens(50), {}}}, 1000));
  auto j = read_json_file(dir.file("manifest.json"));
  LM_ASSERT_OK(j.status());
  (*j)["shards"][0]["tokns"] = 3;
  LM_ASSERT_OK(write_json_file(dir.file("manifest.json"), *j));
  auto set = ShardSet::open(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("shards[0].tokns: unknown key"), std::string::npos)
      << set.status().message();
  EXPECT_EQ(ShardSet::open(dir.file("nothing")).status().code(), absl::StatusCode::kNotFound);
}

// The per-language and per-source reports read through the config reader: required keys, types,
// unknown keys and the weight's range are each named with their path.
TEST(ShardSet, ManifestReportsAreStrict) {
  ShardManifest m;
  m.tokenizer_hash = "0123456789abcdef";
  m.vocab_size = 1000;
  m.eos_id = 2;
  m.bos_id = 1;
  m.framing = tokenizer::kFraming;
  m.languages["bn"].docs = 3;
  m.sources.push_back(SourceReport{"wiki", "bn", 2.0, 3, 40, 100, 10, 1.0, 1.0});
  const Json good = manifest_to_json(m);
  auto back = manifest_from_json(good, "m.json");
  LM_ASSERT_OK(back.status());
  EXPECT_EQ(back->sources.at(0).id, "wiki");
  EXPECT_EQ(back->sources.at(0).train_tokens, 100u);
  EXPECT_EQ(back->languages.at("bn").docs, 3u);
  struct Case {
    std::function<void(Json&)> damage;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["sources"][0].erase("weight"); }, "sources[0].weight: missing"},
      {[](Json& j) { j["sources"][0].erase("id"); }, "sources[0].id: missing"},
      {[](Json& j) { j["sources"][0]["weight"] = -1; }, "sources[0].weight: -1, expected a finite number >= 0"},
      {[](Json& j) { j["sources"][0]["docs"] = "3"; }, "sources[0].docs: expected an integer"},
      {[](Json& j) { j["sources"][0]["shares"] = 1; }, "sources[0]"},
      {[](Json& j) { j["sources"][0] = 5; }, "sources[0]: expected an object"},
      {[](Json& j) { j["languages"]["bn"]["tokens"] = 1; }, "languages.bn"},
      {[](Json& j) { j["languages"]["bn"]["chars"] = -4; }, "languages.bn.chars: expected a non-negative integer"},
  };
  for (const auto& c : cases) {
    Json j = good;
    c.damage(j);
    auto r = manifest_from_json(j, "m.json");
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

// The CLI maps each of these errors to exit code 2 (bad input).
TEST(ShardCli, VerifyExitsTwoOnDamagedShards) {
  const std::string bin = LM_BINARY_DIR "/app/lmtrain";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << bin << " not built";
  TempDir dir;
  LM_ASSERT_OK(testing::write_synthetic_set(dir.path(), {{"bn", "train", testing::iota_tokens(500), {}}}, 1000));
  const std::string cmd = bin + " prepare --verify --out " + dir.path() + " --quiet 2>" + dir.file("err.txt");
  auto run = [&] {
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  ASSERT_EQ(run(), 0) << read_file(dir.file("err.txt")).value_or("");
  const std::string shard = dir.file("bn.train.0.lmtok");
  const std::string good = read_file(shard).value();
  struct Damage {
    const char* name;
    std::function<void()> apply;
    const char* expect;
  };
  std::vector<Damage> cases = {
      {"flipped byte", [&] { flip_byte(shard, kShardHeaderSize + 7); }, "payload_crc"},
      {"truncated", [&] { std::filesystem::resize_file(shard, good.size() - 16); }, "truncated"},
      {"wrong magic", [&] { flip_byte(shard, 0); }, "magic"},
      {"vocab mismatch", [&] {
         auto j = read_json_file(dir.file("manifest.json")).value();
         j["tokenizer"]["vocab_size"] = 2000;
         ASSERT_TRUE(write_json_file(dir.file("manifest.json"), j).ok());
       }, "vocab_size: shard header has 1000"},
  };
  for (const auto& c : cases) {
    LM_ASSERT_OK(write_file_atomic(shard, good));
    LM_ASSERT_OK(testing::write_synthetic_set(dir.path(), {{"bn", "train", testing::iota_tokens(500), {}}}, 1000));
    c.apply();
    EXPECT_EQ(run(), 2) << c.name;
    const std::string err = read_file(dir.file("err.txt")).value_or("");
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
}

}  // namespace
}  // namespace lm::data
