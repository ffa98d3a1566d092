// Tokenizer: normalisation (NFC, ZWNJ/ZWJ, Bengali fixes) survives a round trip, long Bengali
// lines reach the trainer, the GPT-2-style baseline stays in its trap on the sample (< 1.6 code
// points per token for Bangla), invalid UTF-8 is an error or skipped and counted, and a missing,
// corrupt or replaced model gives a clear error.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/file.h"
#include "corpus/corpus.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalize.h"
#include "tokenizer/report.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/train.h"

namespace fs = std::filesystem;
using namespace lm::tokenizer;

#define LM_ASSERT_OK(expr)                 \
  do {                                     \
    const ::absl::Status s_ = (expr);      \
    ASSERT_TRUE(s_.ok()) << s_.ToString(); \
  } while (0)

namespace {

const std::string kSample = std::string(LM_SOURCE_DIR) + "/data/sample";

std::string tmp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tokenizer_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<std::string> read_lines(const std::string& path, size_t max = 1000000) {
  std::vector<std::string> out;
  auto st = lm::data::for_each_document_in_file(path, "lines", "", {}, [&](const std::string& d) {
    out.push_back(d);
    return out.size() >= max ? lm::data::stop_reading() : absl::OkStatus();
  }, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// One small tokenizer trained on part of the repository sample, shared by the tests (~3 s).
class TrainedTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(tmp_dir("shared"));
    auto m = lm::data::load_manifest(kSample + "/corpus.json");
    ASSERT_TRUE(m.ok()) << m.status();
    TrainOptions o;
    o.vocab_size = 2000;
    o.sample_chars = 300000;
    o.threads = 2;
    auto sample = build_sample(*m, o);
    ASSERT_TRUE(sample.ok()) << sample.status();
    SampleSummary summary = sample->summary;
    auto tok = train_tokenizer(*sample, o, *dir_, &summary);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = new Tokenizer(*tok);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete tok_;
  }
  static std::string* dir_;
  static Tokenizer* tok_;
};
std::string* TrainedTokenizer::dir_ = nullptr;
Tokenizer* TrainedTokenizer::tok_ = nullptr;

TEST_F(TrainedTokenizer, SpecialIdsAreFixedAndRecorded) {
  ASSERT_NE(tok_, nullptr);
  EXPECT_EQ(tok_->unk_id(), kUnkId);
  EXPECT_EQ(tok_->bos_id(), kBosId);
  EXPECT_EQ(tok_->eos_id(), kEosId);
  EXPECT_EQ(tok_->pad_id(), kPadId);
  EXPECT_EQ(tok_->vocab_size(), 2000);
  auto loaded = Tokenizer::load(*dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->hash(), tok_->hash());
  EXPECT_EQ(loaded->hash().size(), 16u);
  EXPECT_EQ(loaded->dir(), *dir_);
}

// Issue 21 point 7: the trainer records the framing bos + text + eos in tokenizer.json; a
// tokenizer.json without it (written before) reads as the old text + eos; eos false is refused.
TEST_F(TrainedTokenizer, FramingIsRecordedAndOldFilesReadAsTextPlusEos) {
  ASSERT_NE(tok_, nullptr);
  auto meta = lm::read_json_file(*dir_ + "/tokenizer.json");
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ((*meta)["framing"], (lm::Json{{"bos", true}, {"eos", true}}));
  auto loaded = Tokenizer::load(*dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->framing(), kFraming);
  EXPECT_EQ(loaded->start_id(), kBosId);
  const std::vector<int32_t> text = loaded->encode("আমার সোনার বাংলা");
  std::vector<int32_t> framed = {kBosId};
  framed.insert(framed.end(), text.begin(), text.end());
  framed.push_back(kEosId);
  EXPECT_EQ(loaded->frame(text), framed);
  EXPECT_EQ(loaded->framing().describe(), "bos + text + eos");

  const std::string d = tmp_dir("old_framing");
  fs::copy(*dir_, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  lm::Json old = *meta;
  old.erase("framing");
  ASSERT_TRUE(lm::write_json_file(d + "/tokenizer.json", old).ok());
  auto legacy = Tokenizer::load(d);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->framing(), kLegacyFraming);
  EXPECT_EQ(legacy->start_id(), kEosId);
  EXPECT_EQ(legacy->hash(), loaded->hash());  // the hash names spm.model, not the framing
  EXPECT_EQ(legacy->frame(text).front(), text.front());
  EXPECT_EQ(legacy->framing().describe(), "text + eos");

  old["framing"] = lm::Json{{"bos", true}, {"eos", false}};
  ASSERT_TRUE(lm::write_json_file(d + "/tokenizer.json", old).ok());
  auto no_eos = Tokenizer::load(d);
  EXPECT_EQ(no_eos.status().code(), absl::StatusCode::kInvalidArgument) << no_eos.status();
  EXPECT_NE(no_eos.status().message().find("framing.eos"), std::string::npos) << no_eos.status();
  old["framing"] = lm::Json{{"bos", "yes"}};
  ASSERT_TRUE(lm::write_json_file(d + "/tokenizer.json", old).ok());
  EXPECT_NE(Tokenizer::load(d).status().message().find("framing.bos"), std::string::npos);
  fs::remove_all(d);
}

TEST_F(TrainedTokenizer, NfcAndZeroWidthJoinersSurviveRoundTrip) {
  ASSERT_NE(tok_, nullptr);
  // Already canonical text must come back byte for byte, ZWNJ (U+200C) and ZWJ (U+200D) included
  // (nmt_nfkc turns ZWNJ into a space, which this test catches).
  const std::vector<std::string> exact = {
      "\xE0\xA6\xB0\xE2\x80\x8D\xE0\xA7\x8D\xE0\xA6\xAF\xE0\xA6\xBE\xE0\xA6\xAC",  // র‍্যাব (ZWJ ya-phala)
      "\xE0\xA6\x95\xE0\xA7\x8D\xE2\x80\x8C\xE0\xA6\xB7",                          // ক্‌ষ (ZWNJ, no conjunct)
      "\xE0\xA6\xAC\xE0\xA6\xBE\xE0\xA6\x82\xE0\xA6\xB2\xE0\xA6\xBE  two  spaces, end ",
      "  leading spaces and\ttab",
      "\xE0\xA7\xA7\xE0\xA7\xA8\xE0\xA7\xA9 digits 2026",
      "caf\xC3\xA9 \xF0\x9F\x98\x80 emoji (byte fallback)",
  };
  for (const auto& s : exact) {
    auto ids = tok_->encode(s);
    EXPECT_EQ(tok_->decode(ids), s) << s;
    for (int32_t id : ids) EXPECT_NE(id, tok_->unk_id()) << s;
  }
  // Non-canonical input comes back canonical: NFC (ে + া -> ো, e + U+0301 -> é) and the Bengali fixes.
  struct Case {
    std::string in, want;
  } cases[] = {
      {"\xE0\xA6\x95\xE0\xA7\x87\xE0\xA6\xBE", "\xE0\xA6\x95\xE0\xA7\x8B"},                // কো
      {"cafe\xCC\x81", "caf\xC3\xA9"},
      {"\xE0\xA6\xB9\xE0\xA6\xA0\xE0\xA6\xBE\xE0\xA6\xA4\xE0\xA7\x8D\xE2\x80\x8D",          // হঠাত্‍ -> হঠাৎ
       "\xE0\xA6\xB9\xE0\xA6\xA0\xE0\xA6\xBE\xE0\xA7\x8E"},
      {"\xE0\xA6\xA8\xE0\xA6\xBE\xE0\xA7\xB7", "\xE0\xA6\xA8\xE0\xA6\xBE\xE0\xA5\xA4"},    // না৷ -> না।
  };
  for (const auto& c : cases) {
    EXPECT_EQ(canonical(c.in), c.want) << c.in;
    EXPECT_EQ(tok_->decode(tok_->encode(c.in)), c.want) << c.in;
  }
}

TEST_F(TrainedTokenizer, BatchEqualsSingleAndCopiesShareTheModel) {
  ASSERT_NE(tok_, nullptr);
  auto texts = read_lines(kSample + "/bn_heldout.txt.gz", 20);
  auto en = read_lines(kSample + "/en_heldout.txt.gz", 20);
  texts.insert(texts.end(), en.begin(), en.end());
  Tokenizer copy = *tok_;
  auto batch = copy.encode_batch(texts, 2);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(batch[i], tok_->encode(texts[i]));
    EXPECT_EQ(tok_->decode(batch[i]), canonical(texts[i]));
  }
}

TEST_F(TrainedTokenizer, MissingCorruptOrReplacedModelIsAClearError) {
  ASSERT_NE(tok_, nullptr);
  auto none = Tokenizer::load("/nonexistent/tok");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();

  const std::string d = tmp_dir("broken");
  fs::copy_file(*dir_ + "/tokenizer.json", d + "/tokenizer.json");
  auto missing = Tokenizer::load(d);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(d + "/spm.model: missing"), std::string::npos) << missing.status();

  write_text(d + "/spm.model", "this is not a protobuf \x01\x02\x03");
  auto corrupt = Tokenizer::load(d);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss) << corrupt.status();
  EXPECT_NE(corrupt.status().message().find("spm.model: not a valid SentencePiece model"), std::string::npos)
      << corrupt.status();

  // A valid model that is not the one tokenizer.json describes: an extra (unknown) protobuf
  // field 100 = 1 keeps it parseable, so only the hash check can catch it.
  auto bytes = lm::read_file(*dir_ + "/spm.model");
  ASSERT_TRUE(bytes.ok());
  std::string changed = *bytes + std::string("\xA0\x06\x01", 3);
  ASSERT_TRUE(Tokenizer::from_model_bytes(changed, "x").ok());
  write_text(d + "/spm.model", changed);
  auto replaced = Tokenizer::load(d);
  ASSERT_FALSE(replaced.ok());
  EXPECT_EQ(replaced.status().code(), absl::StatusCode::kFailedPrecondition) << replaced.status();
  EXPECT_NE(replaced.status().message().find("content hash"), std::string::npos) << replaced.status();

  // tokenizer.json is strict, like every config.
  write_text(d + "/spm.model", *bytes);
  write_text(d + "/tokenizer.json", "{\"vocab_size\": 2000, \"bos\": 1}");
  auto strict = Tokenizer::load(d);
  EXPECT_NE(strict.status().message().find("bos: unknown key"), std::string::npos) << strict.status();
  fs::remove_all(d);
}

TEST(TokenizerTrain, LongBengaliLineIsKept) {
  // One line of ~20 KB (SentencePiece's default limit is 4192 bytes) is the only place where the
  // rare letter ঌ (U+098C) occurs. If the line reached SentencePiece whole it would be dropped
  // silently and ঌ would fall back to bytes.
  const std::string d = tmp_dir("long");
  std::string line;
  while (line.size() < 20000)
    line += "\xE0\xA6\x8C\xE0\xA6\x95 \xE0\xA6\x86\xE0\xA6\xAE\xE0\xA6\xBE\xE0\xA6\xB0 \xE0\xA6\x97\xE0\xA6\xBE\xE0\xA6\xA8\xE0\xA5\xA4 ";
  fs::copy_file(kSample + "/bn_wikisource.txt.gz", d + "/wiki.txt.gz");
  write_text(d + "/long.txt", line + "\n");
  write_text(d + "/corpus.json",
             R"({"sources":[{"paths":["wiki.txt.gz","long.txt"],"lang":"bn"}]})");
  auto m = lm::data::load_manifest(d + "/corpus.json");
  ASSERT_TRUE(m.ok()) << m.status();
  TrainOptions o;
  o.vocab_size = 600;
  o.heldout_every = 0;
  o.require_bengali = false;  // else ঌ would be forced into the vocabulary from our own scan
  o.threads = 2;
  auto sample = build_sample(*m, o);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->summary.long_lines_split, 1);
  EXPECT_EQ(sample->summary.lines_dropped, 0);
  SampleSummary summary = sample->summary;
  auto tok = train_tokenizer(*sample, o, d + "/tok", &summary);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = tok->encode("\xE0\xA6\x8C");
  for (int32_t id : ids) EXPECT_FALSE(tok->is_byte(id)) << "ঌ fell back to bytes: the long line was dropped";
  fs::remove_all(d);
}

// The tokenizer's identity is its content (issue 21): `--out tok8k/` and a deeper `tok8k` give the
// same spm.model bytes and hash as the shared one (a third folder), and the model loads and encodes
// the same. (Before, spm.model held the --out path of the rule file.)
TEST_F(TrainedTokenizer, HashIsIndependentOfTheOutputFolder) {
  auto m = lm::data::load_manifest(kSample + "/corpus.json");
  ASSERT_TRUE(m.ok()) << m.status();
  TrainOptions o;
  o.vocab_size = 2000;
  o.sample_chars = 300000;
  o.threads = 2;
  auto sample = build_sample(*m, o);
  ASSERT_TRUE(sample.ok()) << sample.status();
  const std::string d = tmp_dir("portable");
  std::vector<std::string> hashes;
  for (const std::string& out : {d + "/tok8k/", d + "/elsewhere/deeper/tok8k"}) {
    SampleSummary summary = sample->summary;
    auto tok = train_tokenizer(*sample, o, out, &summary);
    ASSERT_TRUE(tok.ok()) << tok.status();
    hashes.push_back(tok->hash());
    auto bytes = lm::read_file(out + "/spm.model");
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(bytes->find(d), std::string::npos) << "spm.model still names its folder";
    EXPECT_EQ(tok->encode("আমার সোনার বাংলা, hello"), tok_->encode("আমার সোনার বাংলা, hello"));
  }
  EXPECT_EQ(hashes[0], tok_->hash());
  EXPECT_EQ(hashes[1], hashes[0]);
  fs::remove_all(d);
}

TEST(TokenizerTrain, SplitLongLinePrefersSentenceEnds) {
  std::vector<std::string> out;
  EXPECT_EQ(split_long_line("short", 300, &out), 1);
  out.clear();
  std::string s;
  for (int i = 0; i < 40; ++i) s += "\xE0\xA6\x86\xE0\xA6\xAE\xE0\xA6\xBF \xE0\xA6\xAF\xE0\xA6\xBE\xE0\xA6\x87\xE0\xA5\xA4 ";
  s.pop_back();  // no trailing space
  split_long_line(s, 300, &out);
  EXPECT_GT(out.size(), 1u);
  size_t total = 0;
  for (const auto& p : out) {
    EXPECT_LE(p.size(), 300u);
    EXPECT_TRUE(p.size() >= 3 && p.substr(p.size() - 3) == "\xE0\xA5\xA4") << p;  // ends at a danda
    EXPECT_TRUE(lm::data::is_valid_utf8(p));
    total += p.size() + 1;
  }
  EXPECT_EQ(total, s.size() + 1);  // nothing lost but the one space at each cut
  out.clear();
  split_long_line(std::string(1000, 'x'), 300, &out);  // no break at all: cut, never dropped
  EXPECT_EQ(out.size(), 4u);
}

TEST(TokenizerTrain, InvalidUtf8NamesFileAndLineOrIsSkippedAndCounted) {
  const std::string d = tmp_dir("utf8");
  write_text(d + "/bad.txt", "one good line here\nsecond \xFF\xFE bad\nthird line\n");
  write_text(d + "/corpus.json", R"({"sources":[{"paths":["bad.txt"],"lang":"en"}]})");
  auto m = lm::data::load_manifest(d + "/corpus.json");
  ASSERT_TRUE(m.ok()) << m.status();
  TrainOptions o;
  o.heldout_every = 0;
  auto err = build_sample(*m, o);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(err.status().message().find(d + "/bad.txt:2: invalid UTF-8"), std::string::npos) << err.status();
  o.skip_invalid_utf8 = true;
  auto ok = build_sample(*m, o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->summary.invalid_utf8_skipped, 1);
  EXPECT_EQ(ok->sentences.size(), 2u);
  fs::remove_all(d);
}

TEST(TokenizerTrain, SampleKeepsTheLanguageRatioOfTheWeights) {
  auto m = lm::data::load_manifest(kSample + "/corpus.json");
  ASSERT_TRUE(m.ok()) << m.status();
  TrainOptions o;
  o.sample_chars = 200000;
  o.heldout_every = 5;
  auto s = build_sample(*m, o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (const auto& l : s->summary.languages) {
    // Whole documents are taken until a source's quota is reached, so a share can overshoot by
    // about one document (<= 5k chars of 200k): 3 percentage points.
    EXPECT_NEAR(l.char_share, l.weight_share, 0.03) << l.lang;
    EXPECT_FALSE(s->heldout[l.lang].empty()) << l.lang;
  }
}

// Issue 31: a source with more text than its share gave its first documents (a Wikipedia dump
// sorted by title gave the sample its "1963 ... football team" articles). The sample is now spread
// evenly over the source (up to sample_spread times its share), and held-out documents stay out.
TEST(TokenizerTrain, SampleIsSpreadOverALargeSource) {
  const std::string d = tmp_dir("spread");
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "doc" + std::to_string(i) + " some words of the document\n";
  write_text(d + "/big.txt", text);  // ~128k chars
  write_text(d + "/corpus.json", R"({"sources": [{"paths": ["big.txt"], "lang": "en"}]})");
  auto m = lm::data::load_manifest(d + "/corpus.json");
  ASSERT_TRUE(m.ok()) << m.status();
  TrainOptions o;
  o.sample_chars = 16000;  // an eighth of the source
  o.heldout_every = 10;
  auto first_doc = [](const TrainingSample& s) { return std::stoi(s.sentences.front().substr(3)); };
  auto last_doc = [](const TrainingSample& s) { return std::stoi(s.sentences.back().substr(3)); };
  auto s = build_sample(*m, o);  // default sample_spread 16: the whole source is counted
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(static_cast<double>(s->summary.languages[0].chars), 16000.0, 40.0);
  EXPECT_LT(first_doc(*s), 20);
  EXPECT_GT(last_doc(*s), 3800) << "the sample is the head of the source";
  for (const auto& line : s->sentences) EXPECT_NE(std::stoi(line.substr(3)) % 10, 9) << "held-out document: " << line;
  EXPECT_EQ(s->heldout["en"].size(), 400u);
  o.sample_spread = 2;  // counted up to twice its share: the sample spreads over the first quarter
  s = build_sample(*m, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(last_doc(*s), 900);  // ~970 documents counted, doc ~1080 the last
  EXPECT_LT(last_doc(*s), 1300);
  o.sample_spread = 1;  // the pre-issue-31 sample: the first documents
  s = build_sample(*m, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_LT(last_doc(*s), 700);  // ~490 documents, doc ~540 the last
  o.sample_spread = -1;
  EXPECT_FALSE(build_sample(*m, o).ok());
  fs::remove_all(d);
}

// Issue #21.4: with equal weights, one small source used to shrink the whole sample (keep_ratio cut
// every source to its shortfall) without a word. Issue 31: its replacement filled from every other
// source, so a short language was filled with another language (35% bn instead of the asked 64%).
// Now a short source is filled from its own language, a short language shrinks the sample at the
// asked language mix, and each shortfall is one warning line.
class SmallSource : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_dir("small_source");
    write_text(dir_ + "/news.txt", lines("খবর", 6000));   // ~96k chars
    write_text(dir_ + "/wiki.txt", lines("wiki", 6000));  // ~96k chars
    write_text(dir_ + "/tiny.txt", lines("ছোট", 200));    // ~2.9k chars
    write_text(dir_ + "/corpus.json", R"({"sources": [
      {"paths": ["news.txt"], "lang": "bn", "weight": 1}, {"paths": ["tiny.txt"], "lang": "bn", "weight": 1},
      {"paths": ["wiki.txt"], "lang": "en", "weight": 1}]})");
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string lines(const std::string& word, int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += word + " " + std::to_string(i) + " " + word + " শেষ\n";
    return text;
  }
  absl::StatusOr<TrainingSample> sample(const TrainOptions& o, std::string* err) {
    auto m = lm::data::load_manifest(dir_ + "/corpus.json");
    if (!m.ok()) return m.status();
    ::testing::internal::CaptureStderr();
    auto s = build_sample(*m, o);
    *err = ::testing::internal::GetCapturedStderr();
    return s;
  }
  static size_t warnings(const std::string& err) {
    size_t n = 0;
    for (size_t at = err.find("warn"); at != std::string::npos; at = err.find("warn", at + 1)) ++n;
    return n;
  }
  std::string dir_;
};

TEST_F(SmallSource, FillsFromItsOwnLanguageAndWarnsNamingTheSource) {
  TrainOptions o;
  o.sample_chars = 60000;  // 20k asked of each source; tiny has ~2.9k
  std::string err;
  auto s = sample(o, &err);
  ASSERT_TRUE(s.ok()) << s.status();
  int64_t chars = 0;
  for (const auto& l : s->summary.languages) chars += l.chars;
  // Whole lines are taken until each budget: within one line (~20 chars) per source of 60k.
  EXPECT_NEAR(static_cast<double>(chars), 60000.0, 100.0) << "the sample shrank";
  EXPECT_NE(err.find("source 'tiny' (sources[1], bn, tiny.txt) has 2."), std::string::npos) << err;
  EXPECT_NE(err.find("of the 60.0k-character sample (20.0k)"), std::string::npos) << err;
  EXPECT_NE(err.find("the other 'bn' sources filled the rest"), std::string::npos) << err;
  EXPECT_EQ(warnings(err), 1u) << err;
  ASSERT_EQ(s->sources.size(), 3u);
  const SourceSample& tiny = s->sources[1];
  EXPECT_TRUE(tiny.exhausted);
  EXPECT_EQ(tiny.asked_chars, 20000);
  EXPECT_NEAR(static_cast<double>(tiny.chars), static_cast<double>(tiny.read_chars), 30.0);
  // news fills bn's 40k; wiki keeps its 20k.
  EXPECT_NEAR(static_cast<double>(s->sources[0].chars), 40000.0 - static_cast<double>(tiny.chars), 100.0);
  EXPECT_NEAR(static_cast<double>(s->sources[2].chars), 20000.0, 100.0);
}

// The issue-31 case: the Bangla sources hold half of what their 64% asks. The sample's language
// mix must be the asked one within 1 point (the old default gave bn 32% here).
TEST_F(SmallSource, AShortLanguageShrinksTheSampleAtTheAskedMix) {
  write_text(dir_ + "/wiki.txt", lines("wiki", 15000));  // ~240k chars of en
  write_text(dir_ + "/corpus.json", R"({"sources": [
      {"paths": ["news.txt"], "lang": "bn", "weight": 64}, {"paths": ["wiki.txt"], "lang": "en", "weight": 36}]})");
  TrainOptions o;
  o.sample_chars = 300000;  // bn asked 192k, has ~94k
  std::string err;
  auto s = sample(o, &err);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->summary.languages.size(), 2u);
  for (const auto& l : s->summary.languages) EXPECT_NEAR(l.char_share, l.weight_share, 0.01) << l.lang;
  EXPECT_EQ(warnings(err), 1u) << err;
  EXPECT_NE(err.find("so every language was cut by the same factor to keep the asked language mix"), std::string::npos)
      << err;
  EXPECT_NE(err.find("bn 64.0% (asked 64.0%"), std::string::npos) << err;
  // en was counted to its end (to spread its sample) but gave only its share: not "all it has".
  const size_t en = err.find("en 36.0% (asked 36.0%, ");
  ASSERT_NE(en, std::string::npos) << err;
  EXPECT_EQ(err.substr(en, err.find(')', en) - en).find("all it has"), std::string::npos) << err;
  EXPECT_NE(err.find("--fill other-languages"), std::string::npos) << err;

  o.fill = "other-languages";  // the explicit option: the size holds, the mix does not, and it says so
  s = sample(o, &err);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_LT(s->summary.languages[0].char_share, 0.4);
  EXPECT_NE(err.find("the other sources (any language) filled the rest"), std::string::npos) << err;
  o.fill = "other";
  s = sample(o, &err);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("fill: expected same-language, other-languages or none, got 'other'"),
            std::string::npos) << s.status();
}

TEST_F(SmallSource, FillNoneShrinksTheSampleButSaysSo) {
  TrainOptions o;
  o.sample_chars = 60000;
  o.fill = "none";
  std::string err;
  auto s = sample(o, &err);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(err.find("source 'tiny'"), std::string::npos) << err;
  EXPECT_NE(err.find("instead of the 60.0k asked"), std::string::npos) << err;
  EXPECT_NEAR(static_cast<double>(s->sources[0].chars), static_cast<double>(s->sources[1].chars), 100.0);
  o.fill = "same-language";
  o.keep_ratio = true;  // the legacy key reads as fill none
  s = sample(o, &err);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(static_cast<double>(s->sources[0].chars), static_cast<double>(s->sources[1].chars), 100.0);
}

// A corpus smaller than the whole sample (the demo's) gets one warning naming every language's share,
// not one per source.
TEST_F(SmallSource, AWholeCorpusSmallerThanTheSampleIsOneWarning) {
  TrainOptions o;
  o.sample_chars = 100000000;
  for (const char* fill : {"same-language", "other-languages"}) {
    o.fill = fill;
    std::string err;
    auto s = sample(o, &err);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(err.find("less than its share"), std::string::npos) << err;
    EXPECT_EQ(warnings(err), 1u) << err;
    EXPECT_NE(err.find("instead of the 100.00M asked (sample_chars): the whole corpus is smaller"), std::string::npos)
        << err;
    for (const char* id : {"bn ", "en "}) EXPECT_NE(err.find(id), std::string::npos) << id << ": " << err;
  }
}

TEST_F(SmallSource, VocabularyTooLargeNamesTheSampleSourcesAndOption) {
  TrainOptions o;
  o.sample_chars = 6000;
  o.vocab_size = 8000;
  o.threads = 2;
  std::string err;
  auto s = sample(o, &err);
  ASSERT_TRUE(s.ok()) << s.status();
  SampleSummary summary = s->summary;
  auto tok = train_tokenizer(*s, o, dir_ + "/tok", &summary);
  ASSERT_FALSE(tok.ok());
  const std::string msg(tok.status().message());
  EXPECT_NE(msg.find("the sample has 6.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'news'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--vocab-size (now 8000)"), std::string::npos) << msg;
}

TEST(Baseline, Gpt2PretokenizerSplitsBengaliMarks) {
  auto v = gpt2_pretokenize("Hello world's 12 ok!!  x\n");
  std::vector<std::string> got(v.begin(), v.end());
  EXPECT_EQ(got, (std::vector<std::string>{"Hello", " world", "'s", " 12", " ok", "!!", " ", " x", "\n"}));
  // বাংলা = ব া ং ল া: letters and marks alternate, so the regex cuts it into 4 pieces.
  v = gpt2_pretokenize("\xE0\xA6\xAC\xE0\xA6\xBE\xE0\xA6\x82\xE0\xA6\xB2\xE0\xA6\xBE");
  EXPECT_EQ(v.size(), 4u);
}

TEST(Baseline, ByteBpeRoundTripsAndStaysInTheTrapOnTheSample) {
  // The trap must stay visible: the GPT-2-style baseline gives Bangla < 1.6 code points per
  // token (reference report: ~1.4), while the real tokenizer's pre-tokenization does not cap it.
  std::vector<std::string> train;
  auto m = lm::data::load_manifest(kSample + "/corpus.json");
  ASSERT_TRUE(m.ok()) << m.status();
  for (const auto& src : m->sources)
    LM_ASSERT_OK(lm::data::for_each_document(*m, src, {}, [&](const std::string& d) {
      train.push_back(d);
      return absl::OkStatus();
    }, nullptr));
  ByteBpe bpe = ByteBpe::train(train, 8000);
  EXPECT_EQ(bpe.vocab_size(), 8000);
  EncoderFns e;
  e.name = "gpt2-bpe";
  e.encode = [&](std::string_view s) { return bpe.encode(s); };
  e.decode = [&](const std::vector<int32_t>& ids) { return bpe.decode(ids); };
  e.is_unk = [](int32_t) { return false; };
  e.is_byte = [](int32_t) { return false; };
  auto bn = measure_fertility(e, "bn", "heldout", read_lines(kSample + "/bn_heldout.txt.gz"));
  auto en = measure_fertility(e, "en", "heldout", read_lines(kSample + "/en_heldout.txt.gz"));
  EXPECT_LT(bn.cp_per_token, 1.6);
  EXPECT_GT(bn.cp_per_token, 1.0);  // it does merge inside the pieces
  EXPECT_GT(en.cp_per_token, 3.0);  // English is fine with the same regex
  EXPECT_EQ(bn.roundtrip_rate, 1.0);
  EXPECT_EQ(en.roundtrip_rate, 1.0);
}

TEST(Normalize, RuleTableHoldsNfcAndTheBengaliFixes) {
  const std::string t = nfc_rule_tsv();
  EXPECT_NE(t.find("09C7 09BE\t09CB\n"), std::string::npos);        // ে + া -> ো
  EXPECT_NE(t.find("09A4 09CD 200D\t09CE\n"), std::string::npos);   // ত্‍ -> ৎ
  EXPECT_NE(t.find("09F7\t0964\n"), std::string::npos);             // ৷ -> ।
  EXPECT_NE(t.find("09DF\t09AF 09BC\n"), std::string::npos);        // য় (composition exclusion)
  EXPECT_EQ(t.find("200C\t"), std::string::npos);                   // ZWNJ untouched
  EXPECT_EQ(t.find("FB01\t"), std::string::npos);                   // no compatibility folds (NFKC's ﬁ -> fi)
  EXPECT_FALSE(icu_version().empty());
}

}  // namespace
