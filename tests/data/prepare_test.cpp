// lmtrain prepare end to end on a small synthetic corpus with a tiny trained tokenizer.
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/config.h"
#include "core/file.h"
#include "data/prepare.h"
#include "data/sampler.h"
#include "tests/data/test_util.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/import_hf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/train.h"

namespace lm::data {
namespace {

namespace fs = std::filesystem;

// Documents from two small word lists, deterministic for a seed.
std::vector<std::string> make_docs(const std::vector<std::string>& words, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> docs;
  for (int d = 0; d < n; ++d) {
    std::string doc;
    const int len = 5 + static_cast<int>(rng() % 40);
    for (int w = 0; w < len; ++w) doc += (w ? " " : "") + words[rng() % words.size()];
    docs.push_back(doc + " " + std::to_string(d));  // unique: no accidental duplicates
  }
  return docs;
}

class PrepareTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    bn_ = make_docs({"আমার", "সোনার", "বাংলা", "আমি", "তোমায়", "ভালোবাসি", "চিরদিন", "তোমার", "আকাশ",
                     "বাতাস", "প্রাণে", "বাজায়", "বাঁশি"},
                    1200, 1);
    en_ = make_docs({"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "while", "rivers",
                     "flow", "to", "sea"},
                    600, 2);
    {
      std::ofstream f(dir_->file("bn.txt"));
      for (const auto& d : bn_) f << d << "\n";
      f << "\n   \n";  // empty documents are dropped by the reader
    }
    {
      std::ofstream f(dir_->file("en.jsonl"));
      for (const auto& d : en_) f << Json{{"text", d}, {"id", 1}}.dump() << "\n";
    }
    std::ofstream(dir_->file("corpus.json"))
        << R"({"sources": [{"paths": ["bn.txt"], "format": "lines", "lang": "bn", "weight": 3},
                           {"paths": ["en.jsonl"], "format": "jsonl", "lang": "en", "weight": 1}]})";
    tokenizer::TrainingSample sample;
    sample.langs = {"bn", "en"};
    for (const auto& d : bn_) sample.sentences.push_back(d), sample.sentence_lang.push_back(0);
    for (const auto& d : en_) sample.sentences.push_back(d), sample.sentence_lang.push_back(1);
    tokenizer::TrainOptions topt;
    topt.vocab_size = 330;  // this sample needs >= 322 (required chars) and allows <= 335
    topt.threads = 2;
    topt.seed_sentencepiece_size = 20000;
    tokenizer::SampleSummary summary;
    auto tok = tokenizer::train_tokenizer(sample, topt, dir_->file("tok"), &summary);
    if (!tok.ok()) error_ = std::string(tok.status().message());
  }
  void SetUp() override { ASSERT_TRUE(error_.empty()) << error_; }
  static void TearDownTestSuite() { delete dir_; }

  static PrepareOptions options(const std::string& out) {
    PrepareOptions o;
    o.corpus = dir_->file("corpus.json");
    o.tokenizer = dir_->file("tok");
    o.out = dir_->file(out);
    o.val_fraction = 0.1;
    o.threads = 2;
    o.batch_bytes = 20000;  // many batches, so the reader/encoder hand-off is exercised
    return o;
  }

  static testing::TempDir* dir_;
  static std::string error_;
  static std::vector<std::string> bn_, en_;
};
testing::TempDir* PrepareTest::dir_ = nullptr;
std::string PrepareTest::error_;
std::vector<std::string> PrepareTest::bn_, PrepareTest::en_;

TEST_F(PrepareTest, ShardsHoldEveryDocumentWithBosAndEos) {
  auto m = prepare(options("shards"));
  LM_ASSERT_OK(m.status());
  auto set = ShardSet::open(dir_->file("shards"));
  LM_ASSERT_OK(set.status());
  auto tok = tokenizer::Tokenizer::load(dir_->file("tok"));
  LM_ASSERT_OK(tok.status());
  LM_ASSERT_OK(set->check_tokenizer(*tok));
  EXPECT_EQ(set->languages("train"), (std::vector<std::string>{"bn", "en"}));
  EXPECT_EQ(set->languages("val"), (std::vector<std::string>{"bn", "en"}));
  EXPECT_EQ(set->weights().at("bn"), 3.0);

  // Every document is in exactly one split, is framed bos + text + eos (the trained tokenizer's
  // framing), and its text decodes back to a corpus document.
  std::map<std::string, std::multiset<std::string>> decoded;
  for (const auto& lang : {"bn", "en"}) {
    for (const char* split : {"train", "val"}) {
      for (const auto& r : set->readers(lang, split)) {
        const auto offs = r.doc_offsets();
        for (size_t d = 0; d + 1 < offs.size(); ++d) {
          std::vector<int32_t> ids(offs[d + 1] - offs[d]);
          r.copy(offs[d], ids.size(), ids.data());
          ASSERT_GE(ids.size(), 3u);
          ASSERT_EQ(ids.front(), tok->bos_id());
          ASSERT_EQ(ids.back(), tok->eos_id());
          ids.pop_back();
          ids.erase(ids.begin());
          EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->eos_id()), 0);
          EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->bos_id()), 0);
          decoded[lang].insert(tok->decode(ids));
        }
      }
    }
  }
  EXPECT_EQ(decoded["bn"], std::multiset<std::string>(bn_.begin(), bn_.end()));
  EXPECT_EQ(decoded["en"], std::multiset<std::string>(en_.begin(), en_.end()));

  const LanguageReport& bn = m->languages.at("bn");
  EXPECT_EQ(bn.docs, bn_.size());
  EXPECT_EQ(bn.train_docs + bn.val_docs, bn_.size());
  // Validation share: 10% by hash of 1200 docs; a binomial's sd is ~10 docs, allow ~4 sd.
  EXPECT_NEAR(static_cast<double>(bn.val_docs), 120.0, 40.0);
  EXPECT_DOUBLE_EQ(bn.token_share, 0.75);
  EXPECT_EQ(bn.train_tokens, set->tokens("bn", "train"));
  EXPECT_EQ(m->prepare.at("empty_dropped").get<int64_t>(), 2);
  EXPECT_EQ(m->prepare.at("nulls_skipped").get<int64_t>(), 0);  // no Parquet here; counted when there is
  EXPECT_NE(format_report(*m).find("75.0%"), std::string::npos) << format_report(*m);

  // The sampler reads it with the recorded weights.
  SamplerConfig sc;
  sc.batch = 2;
  sc.seq_len = 16;
  auto s = BatchSampler::create(*set, sc);
  LM_ASSERT_OK(s.status());
  EXPECT_DOUBLE_EQ(s->probability("bn"), 0.75);
  auto v = validation_windows(*set, "en", 16, 4);
  LM_ASSERT_OK(v.status());
  EXPECT_EQ(v->size(), 4u);
}

// A copy of the trained tokenizer whose tokenizer.json has no "framing": one written before the
// framing was recorded, which reads as text + eos.
std::string legacy_tokenizer(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  auto j = read_json_file(to + "/tokenizer.json");
  EXPECT_TRUE(j.ok() && j->contains("framing")) << "the trainer records the framing";
  if (j.ok()) j->erase("framing");
  EXPECT_TRUE(write_json_file(to + "/tokenizer.json", *j).ok());
  return to;
}

// Issue 21 point 7: one framing. The trained tokenizer says bos + text + eos, prepare writes the
// shards so and records it in manifest.json, and a tokenizer of another framing is refused with
// both files named and the fix.
TEST_F(PrepareTest, ShardsRecordTheTokenizersFramingAndAnotherIsRefused) {
  auto tok = tokenizer::Tokenizer::load(dir_->file("tok"));
  LM_ASSERT_OK(tok.status());
  EXPECT_EQ(tok->framing(), tokenizer::kFraming);
  LM_ASSERT_OK(prepare(options("framed")).status());
  auto set = ShardSet::open(dir_->file("framed"));
  LM_ASSERT_OK(set.status());
  for (const auto& r : set->all_readers()) {  // every shard starts a document: [bos, text...]
    std::vector<int32_t> head(2);
    r.copy(0, 2, head.data());
    EXPECT_EQ(head[0], tok->bos_id()) << r.path();
    EXPECT_NE(head[1], tok->bos_id()) << r.path();
  }
  auto j = read_json_file(dir_->file("framed/manifest.json"));
  LM_ASSERT_OK(j.status());
  EXPECT_EQ((*j)["framing"], (Json{{"bos", true}, {"eos", true}}));
  EXPECT_EQ((*j)["version"], 2);

  testing::TempDir other;
  auto old_tok = tokenizer::Tokenizer::load(legacy_tokenizer(dir_->file("tok"), other.file("old_tok")));
  LM_ASSERT_OK(old_tok.status());
  EXPECT_EQ(old_tok->framing(), tokenizer::kLegacyFraming);
  EXPECT_EQ(old_tok->hash(), tok->hash());  // same vocabulary: only the framing tells them apart
  const absl::Status st = set->check_tokenizer(*old_tok);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  for (const char* needle : {"framed/manifest.json", "old_tok/tokenizer.json", "bos + text + eos but",
                             "says text + eos", "re-run 'lmtrain prepare"})
    EXPECT_NE(st.message().find(needle), std::string::npos) << needle << " in: " << st;

  // Prepared with the old tokenizer: text + eos, recorded so; now the new one is refused.
  PrepareOptions o = options("old_framed");
  o.tokenizer = other.file("old_tok");
  LM_ASSERT_OK(prepare(o).status());
  auto old_set = ShardSet::open(dir_->file("old_framed"));
  LM_ASSERT_OK(old_set.status());
  EXPECT_EQ(old_set->framing(), tokenizer::kLegacyFraming);
  std::vector<int32_t> first(1);
  old_set->all_readers()[0].copy(0, 1, first.data());
  EXPECT_NE(first[0], tok->bos_id());
  EXPECT_TRUE(old_set->check_tokenizer(*old_tok).ok());
  EXPECT_EQ(old_set->check_tokenizer(*tok).code(), absl::StatusCode::kFailedPrecondition);
}

// A version 1 manifest has no "framing" and reads as text + eos (what prepare wrote then);
// version 2 requires it, and version 1 may not carry it.
TEST_F(PrepareTest, ManifestVersionDecidesHowFramingIsRead) {
  LM_ASSERT_OK(prepare(options("versions")).status());
  auto j = read_json_file(dir_->file("versions/manifest.json"));
  LM_ASSERT_OK(j.status());
  Json v1 = *j;
  v1["version"] = 1;
  v1.erase("framing");
  auto m = manifest_from_json(v1, "m.json");
  LM_ASSERT_OK(m.status());
  EXPECT_EQ(m->framing, tokenizer::kLegacyFraming);
  Json v1_framed = *j;
  v1_framed["version"] = 1;
  EXPECT_NE(manifest_from_json(v1_framed, "m.json").status().message().find("framing"), std::string::npos);
  Json v2_bare = *j;
  v2_bare.erase("framing");
  EXPECT_NE(manifest_from_json(v2_bare, "m.json").status().message().find("framing: missing"), std::string::npos);
  Json v2_half = *j;
  v2_half["framing"].erase("bos");
  EXPECT_NE(manifest_from_json(v2_half, "m.json").status().message().find("framing.bos: missing"),
            std::string::npos);
}

// Portable artefacts (issue 21): the manifest names the tokenizer relative to itself, so a folder
// holding shards and tokenizer moved elsewhere still finds it; an older manifest's absolute path
// still reads.
TEST_F(PrepareTest, ManifestFindsTheTokenizerAfterBothAreMoved) {
  testing::TempDir other;
  const std::string from = other.file("a"), to = other.file("moved/b");
  fs::create_directories(from);
  fs::copy(dir_->file("tok"), from + "/tok", fs::copy_options::recursive);
  PrepareOptions o = options("unused");
  o.tokenizer = from + "/tok/";
  o.out = from + "/data/shards/";
  LM_ASSERT_OK(prepare(o).status());
  auto j = read_json_file(from + "/data/shards/manifest.json");
  LM_ASSERT_OK(j.status());
  EXPECT_EQ((*j)["tokenizer"]["dir"], "../../tok");
  fs::create_directories(other.file("moved"));
  fs::rename(from, to);
  auto set = ShardSet::open(to + "/data/shards");
  LM_ASSERT_OK(set.status());
  EXPECT_EQ(set->tokenizer_path(), to + "/tok");
  auto tok = tokenizer::Tokenizer::load(set->tokenizer_path());
  LM_ASSERT_OK(tok.status());
  LM_ASSERT_OK(set->check_tokenizer(tok->hash(), tok->vocab_size()));
  // An older manifest with an absolute path.
  (*j)["tokenizer"]["dir"] = to + "/tok";
  LM_ASSERT_OK(write_json_file(to + "/data/shards/manifest.json", *j));
  auto old = ShardSet::open(to + "/data/shards");
  LM_ASSERT_OK(old.status());
  EXPECT_EQ(old->tokenizer_path(), to + "/tok");
}

TEST_F(PrepareTest, OutputIsIdenticalForAnyThreadCountAndSplitIsStable) {
  PrepareOptions one = options("one");
  one.threads = 1;
  one.batch_bytes = 1 << 20;
  PrepareOptions two = options("two");
  two.shard_tokens = 1 << 30;
  LM_ASSERT_OK(prepare(one).status());
  LM_ASSERT_OK(prepare(two).status());
  for (const auto& e : fs::directory_iterator(dir_->file("one"))) {
    if (e.path().extension() != ".lmtok") continue;
    const auto a = read_file(e.path().string());
    const auto b = read_file(dir_->file("two/" + e.path().filename().string()));
    LM_ASSERT_OK(b.status());
    EXPECT_TRUE(*a == *b) << e.path();
  }
  EXPECT_EQ(is_validation_doc("some document", 0.5), is_validation_doc("some document", 0.5));
  EXPECT_FALSE(is_validation_doc("some document", 0.0));
}

TEST_F(PrepareTest, ShardTokensSplitsIntoSeveralShards) {
  PrepareOptions o = options("small");
  o.shard_tokens = 2000;
  auto m = prepare(o);
  LM_ASSERT_OK(m.status());
  auto set = ShardSet::open(o.out);
  LM_ASSERT_OK(set.status());
  EXPECT_GT(set->readers("bn", "train").size(), 3u);
  for (const auto& r : set->all_readers()) {
    // A shard closes at the first document that reaches the limit.
    EXPECT_LT(r.size(), 2000u + 200u) << r.path();
  }
  auto sum = verify_shards(o.out, o.tokenizer);
  LM_ASSERT_OK(sum.status());
  EXPECT_NE(sum->find("verified"), std::string::npos);
}

// Issue #21.5: one meaning of weight. bn has two sources of weight 2 (news: 900 documents,
// lit: 300) and an empty one of weight 5; en one of weight 1. Each source with text gets its
// weight's share; issue 31: the empty one's weight stays with its language (bn 9 of 10, shared
// by news and lit by their weights, and it says so), so the language mix is the asked one; the
// old rule gave it to every source (bn 0.8) and before issue 21 bn's windows were drawn evenly.
TEST_F(PrepareTest, WeightsArePerSourceAndAnEmptySourceLeavesItsWeightToItsLanguage) {
  {
    std::ofstream a(dir_->file("news.txt")), b(dir_->file("lit.txt")), e(dir_->file("empty.txt"));
    for (size_t i = 0; i < bn_.size(); ++i) (i < 900 ? a : b) << bn_[i] << "\n";
    e << "\n  \n";
  }
  std::ofstream(dir_->file("mix.json"))
      << R"({"sources": [{"paths": ["news.txt"], "lang": "bn", "weight": 2},
                         {"paths": ["lit.txt"], "lang": "bn", "weight": 2},
                         {"paths": ["empty.txt"], "lang": "bn", "weight": 5},
                         {"paths": ["en.jsonl"], "format": "jsonl", "lang": "en", "weight": 1}]})";
  PrepareOptions o = options("mix");
  o.corpus = dir_->file("mix.json");
  ::testing::internal::CaptureStderr();
  auto m = prepare(o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  LM_ASSERT_OK(m.status());
  EXPECT_NE(err.find("source 'empty' (sources[2], bn, empty.txt) has no training tokens; its weight 5 goes to "
                     "the other 'bn' sources (the language mix stays as asked)"), std::string::npos) << err;
  EXPECT_DOUBLE_EQ(m->languages.at("bn").token_share, 0.9);
  EXPECT_DOUBLE_EQ(m->weights.at("bn"), 9.0);
  ASSERT_EQ(m->sources.size(), 4u);
  EXPECT_EQ(m->sources[0].id, "news");
  EXPECT_DOUBLE_EQ(m->sources[0].share, 0.45);
  EXPECT_DOUBLE_EQ(m->sources[1].share, 0.45);
  EXPECT_DOUBLE_EQ(m->sources[2].share, 0.0);
  EXPECT_DOUBLE_EQ(m->sources[3].share, 0.1);
  EXPECT_EQ(m->sources[0].docs, 900u);
  EXPECT_EQ(m->sources[0].train_tokens + m->sources[1].train_tokens, m->languages.at("bn").train_tokens);
  const std::string report = format_report(*m);
  EXPECT_NE(report.find("news"), std::string::npos) << report;

  // The sampler reads the per-source weights back from manifest.json.
  auto set = ShardSet::open(o.out);
  LM_ASSERT_OK(set.status());
  EXPECT_EQ(set->sources("bn", "train"), (std::vector<std::string>{"news", "lit"}));
  SamplerConfig sc;
  sc.batch = 2;
  sc.seq_len = 16;
  auto s = BatchSampler::create(*set, sc);
  LM_ASSERT_OK(s.status());
  ASSERT_EQ(s->streams().size(), 3u);
  EXPECT_EQ(s->streams()[1].name, "bn/lit");
  EXPECT_DOUBLE_EQ(s->streams()[1].probability, 0.45);
  EXPECT_DOUBLE_EQ(s->probability("bn"), 0.9);
}

// --plan-tokens: the passes over each language and source that a token budget makes, in the
// manifest and the report, with a warning for those above 4 (Muennighoff et al. 2023).
TEST_F(PrepareTest, PlanTokensReportsPassesAndWarnsAboveFour) {
  PrepareOptions o = options("plan");
  auto first = prepare(o);
  LM_ASSERT_OK(first.status());
  const double bn_tokens = static_cast<double>(first->languages.at("bn").train_tokens);
  const double en_tokens = static_cast<double>(first->languages.at("en").train_tokens);
  // bn draws 75%: 5 passes over bn; en draws 25%: 5/3 * bn_tokens / en_tokens passes (< 4 here).
  o.plan_tokens = 5 * bn_tokens / 0.75;
  o.out = dir_->file("plan2");
  ::testing::internal::CaptureStderr();
  auto m = prepare(o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  LM_ASSERT_OK(m.status());
  ASSERT_LT(5.0 / 3 * bn_tokens / en_tokens, 4.0);
  EXPECT_NE(err.find("repeat the same text more than 4 times: language 'bn' 5.0 passes over"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("language 'en'"), std::string::npos) << err;
  const Json& rows = m->prepare.at("passes").at("rows");
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("lang"), "bn");
  EXPECT_NEAR(rows[0].at("passes").get<double>(), 5.0, 1e-9);
  EXPECT_NEAR(rows[1].at("passes").get<double>(), o.plan_tokens * 0.25 / en_tokens, 1e-9);
  const std::string report = format_report(*m);
  EXPECT_NE(report.find("5.00x  > 4"), std::string::npos) << report;
  // The manifest keeps the plan: the report reads the same from the file.
  auto set = ShardSet::open(o.out);
  LM_ASSERT_OK(set.status());
  EXPECT_EQ(format_report(set->manifest()), report);
}

// A bad line late in the corpus, after many batches were encoded and shards flushed to staging,
// fails the whole prepare naming file and line; the folder's earlier shards and manifest stay as
// they were, byte for byte, and no staging folder is left behind.
TEST_F(PrepareTest, ALateBadLineLeavesTheExistingShardsUntouched) {
  PrepareOptions o = options("keep");
  o.shard_tokens = 2000;  // several shards per source, flushed while reading goes on
  ASSERT_TRUE(prepare(o).ok());
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(o.out)) before[e.path().filename().string()] = read_file(e.path().string()).value();
  ASSERT_GT(before.size(), 4u);
  {
    std::ofstream f(dir_->file("late_bad.txt"));
    for (const auto& d : bn_) f << d << "\n";
    f << "ok\n\xc3\x28 invalid\n";  // the last line of the last source
  }
  std::ofstream(dir_->file("corpus_late_bad.json"))
      << R"({"sources": [{"paths": ["en.jsonl"], "format": "jsonl", "lang": "en"},
                         {"paths": ["late_bad.txt"], "format": "lines", "lang": "bn"}]})";
  o.corpus = dir_->file("corpus_late_bad.json");
  o.batch_bytes = 2000;
  auto r = prepare(o);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("late_bad.txt:1202"), std::string::npos) << msg;
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(o.out)) after[e.path().filename().string()] = read_file(e.path().string()).value();
  EXPECT_TRUE(after == before) << "files before " << before.size() << ", after " << after.size();
  EXPECT_FALSE(fs::exists(fs::path(o.out) / ".prepare.tmp"));
}

// An HF checkpoint's byte-level BPE (imported as 'lmtrain tokenizer --import' does) whose BOS and
// EOS lie above 65,535: the shards hold 32-bit tokens, every document framed with those ids, and
// its text decodes back. The tokenizer: the 256 bytes and one merge, BOS/EOS as added tokens.
TEST_F(PrepareTest, ForeignTokenizerWithIdsAbove65535) {
  const std::string hf = dir_->file("hf_ckpt");
  fs::create_directories(hf);
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string u;
    const char32_t c = tokenizer::byte_to_unicode()[b];
    if (c < 0x80) u += static_cast<char>(c);
    else u += static_cast<char>(0xC0 | (c >> 6)), u += static_cast<char>(0x80 | (c & 0x3F));
    vocab[u] = b;
  }
  vocab["th"] = 256;
  const Json added = Json::array({Json{{"id", 70000}, {"content", "<|bos|>"}, {"special", true}},
                                  Json{{"id", 70001}, {"content", "<|eos|>"}, {"special", true}}});
  const Json tpl{{"type", "TemplateProcessing"},
                 {"single", Json::array({Json{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                         Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                 {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {70000}}, {"tokens", {"<|bos|>"}}}}}}};
  const Json j{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array({"t h"})}}},
               {"added_tokens", added},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
               {"post_processor", tpl},
               {"decoder", {{"type", "ByteLevel"}}}};
  std::ofstream(hf + "/tokenizer.json") << j.dump();
  std::ofstream(hf + "/tokenizer_config.json") << R"({"eos_token": "<|eos|>"})";
  std::ofstream(hf + "/config.json") << R"({"vocab_size": 70016})";
  auto tok = tokenizer::import_hf_tokenizer({hf, dir_->file("hf_tok"), false});
  LM_ASSERT_OK(tok.status());
  EXPECT_EQ(tok->vocab_size(), 70016);
  EXPECT_EQ(tok->framing(), (tokenizer::Framing{true, true}));
  PrepareOptions o = options("hf_shards");
  o.tokenizer = dir_->file("hf_tok");
  LM_ASSERT_OK(prepare(o).status());
  auto set = ShardSet::open(o.out);
  LM_ASSERT_OK(set.status());
  LM_ASSERT_OK(set->check_tokenizer(*tok));
  std::multiset<std::string> decoded;
  int64_t merged = 0;
  for (const auto& r : set->readers("en", "train")) {
    EXPECT_EQ(r.header().token_width, 4u);
    const auto offs = r.doc_offsets();
    for (size_t d = 0; d + 1 < offs.size(); ++d) {
      std::vector<int32_t> ids(offs[d + 1] - offs[d]);
      r.copy(offs[d], ids.size(), ids.data());
      ASSERT_GE(ids.size(), 3u);
      ASSERT_EQ(ids.front(), 70000);
      ASSERT_EQ(ids.back(), 70001);
      merged += std::count(ids.begin(), ids.end(), 256);  // "the" holds the merge t h
      decoded.insert(tok->decode(std::vector<int32_t>(ids.begin() + 1, ids.end() - 1)));
    }
  }
  ASSERT_FALSE(decoded.empty());
  EXPECT_GT(merged, 0);
  for (const auto& d : decoded) EXPECT_NE(std::find(en_.begin(), en_.end(), d), en_.end()) << d;
}

TEST_F(PrepareTest, BadInputsAreClearErrors) {
  PrepareOptions o = options("bad");
  o.val_fraction = 1.5;
  EXPECT_EQ(prepare(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = options("bad");
  o.tokenizer = dir_->file("no-such-tok");
  EXPECT_EQ(prepare(o).status().code(), absl::StatusCode::kNotFound);
  o = options("bad");
  o.corpus = dir_->file("no-such-corpus.json");
  EXPECT_EQ(prepare(o).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lm::data
