// Vocabulary allocation per language (issue 31): unigram models trained per language and merged
// into one SentencePiece model keep the specials and byte pieces at their ids, every character of
// either language, each language's share of the pieces, and exact round trips; the merged model is
// the tokenizer folder's spm.model, and tokenizer.json records what each language got.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/file.h"
#include "corpus/corpus.h"
#include "tokenizer/merge.h"
#include "tokenizer/model_proto.h"
#include "tokenizer/normalize.h"
#include "tokenizer/spm_bridge.h"
#include "tokenizer/sweep.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/train.h"

namespace fs = std::filesystem;
using namespace lm::tokenizer;

namespace {

const std::string kSample = std::string(LM_SOURCE_DIR) + "/data/sample";

// One model per language of the repository sample, trained once for the suite (~3 s).
class PerLanguage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = lm::data::load_manifest(kSample + "/corpus.json");
    ASSERT_TRUE(m.ok()) << m.status();
    TrainOptions o;
    o.sample_chars = 300000;
    o.threads = 2;
    auto s = build_sample(*m, o);
    ASSERT_TRUE(s.ok()) << s.status();
    sample_ = new TrainingSample(std::move(*s));
    const std::string rules = (fs::temp_directory_path() / ("merge_test_rules_" + std::to_string(::getpid()))).string();
    ASSERT_TRUE(lm::write_file_atomic(rules, nfc_rule_tsv()).ok());
    for (size_t l = 0; l < sample_->langs.size(); ++l) {
      std::vector<std::string> text;
      for (size_t i = 0; i < sample_->sentences.size(); ++i)
        if (sample_->sentence_lang[i] == static_cast<int32_t>(l)) text.push_back(sample_->sentences[i]);
      auto kw = spm_kwargs(o, "", rules);
      kw["vocab_size"] = "1500";
      std::string model, error;
      ASSERT_TRUE(bridge::train(kw, text, &model, &error)) << error;
      models_.push_back({sample_->langs[l], model, sample_->summary.languages[l].char_share, 0.5});
      texts_.push_back(text);
    }
    fs::remove(rules);
  }
  static void TearDownTestSuite() { delete sample_; }
  static TrainingSample* sample_;
  static std::vector<LanguageModel> models_;
  static std::vector<std::vector<std::string>> texts_;
};
TrainingSample* PerLanguage::sample_ = nullptr;
std::vector<LanguageModel> PerLanguage::models_;
std::vector<std::vector<std::string>> PerLanguage::texts_;

TEST_F(PerLanguage, ModelPartsRoundTripTheWireFormat) {
  ModelParts parts;
  ASSERT_TRUE(parse_model_parts(models_[0].model, &parts));
  EXPECT_EQ(parts.pieces.size(), 1500u);
  EXPECT_EQ(parts.pieces[0].piece, "<unk>");
  EXPECT_EQ(parts.pieces[4].piece, "<0x00>");
  EXPECT_EQ(parts.pieces[4].type, 6);  // BYTE
  // Serializing gives a model that encodes as the original (no self-test data was trained in).
  std::string error;
  auto a = bridge::load_model(models_[0].model, &error);
  auto b = bridge::load_model(serialize_model_parts(parts), &error);
  ASSERT_TRUE(a && b) << error;
  for (size_t i = 0; i < 50; ++i) {
    std::vector<int32_t> x, y;
    bridge::encode(*a, texts_[0][i], &x);
    bridge::encode(*b, texts_[0][i], &y);
    EXPECT_EQ(x, y) << texts_[0][i];
  }
  ModelParts bad;
  EXPECT_FALSE(parse_model_parts(std::string("\x0a\xff", 2), &bad));
}

TEST_F(PerLanguage, MergeKeepsIdsCharactersSharesAndRoundTrips) {
  std::vector<MergedLanguage> stats;
  auto merged = merge_unigram_models(models_, 2000, &stats);
  ASSERT_TRUE(merged.ok()) << merged.status();
  auto tok = Tokenizer::from_model_bytes(*merged, "merged.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), 2000);
  EXPECT_EQ(tok->unk_id(), kUnkId);
  EXPECT_EQ(tok->bos_id(), kBosId);
  EXPECT_EQ(tok->eos_id(), kEosId);
  EXPECT_EQ(tok->pad_id(), kPadId);
  ASSERT_EQ(stats.size(), 2u);
  // Equal shares: each language keeps about half of the 1740 normal pieces (shared ones count for both).
  for (const MergedLanguage& s : stats) {
    EXPECT_EQ(s.trained, 1500 - 260) << s.lang;
    EXPECT_NEAR(static_cast<double>(s.kept - s.shared / 2), 870.0, 90.0) << s.lang;
  }
  // Every character a language model had keeps its own piece: no more byte fallback on its text
  // than with its own model (rare characters are bytes in both), and every text comes back exactly.
  for (size_t l = 0; l < texts_.size(); ++l) {
    auto own = Tokenizer::from_model_bytes(models_[l].model, "own.model");
    ASSERT_TRUE(own.ok()) << own.status();
    int64_t bytes = 0, own_bytes = 0;
    for (const std::string& text : texts_[l]) {
      const auto ids = tok->encode(text);
      for (int32_t id : ids) bytes += tok->is_byte(id);
      for (int32_t id : own->encode(text)) own_bytes += own->is_byte(id);
      EXPECT_EQ(tok->decode(ids), canonical(text));
    }
    EXPECT_LE(bytes, own_bytes) << models_[l].lang;
  }
}

TEST_F(PerLanguage, MergeGivesEachLanguageItsShare) {
  std::vector<LanguageModel> m = models_;
  m[0].vocab_share = 0.8;
  m[1].vocab_share = 0.2;
  std::vector<MergedLanguage> stats;
  auto merged = merge_unigram_models(m, 1800, &stats);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_GT(stats[0].kept, 3 * stats[1].kept / 2) << m[0].lang << " 80% vs " << m[1].lang << " 20%";
}

TEST_F(PerLanguage, MergeErrorsNameTheCause) {
  auto too_big = merge_unigram_models(models_, 5000);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("fewer than the 4740 a vocabulary of 5000 needs"), std::string::npos)
      << too_big.status();
  std::vector<LanguageModel> m = models_;
  ModelParts parts;
  ASSERT_TRUE(parse_model_parts(m[1].model, &parts));
  parts.pieces[3].piece = "<mask>";
  m[1].model = serialize_model_parts(parts);
  auto differ = merge_unigram_models(m, 2000);
  ASSERT_FALSE(differ.ok());
  EXPECT_NE(differ.status().message().find("piece 3 ('<mask>') differs"), std::string::npos) << differ.status();
}

// vocab_allocation per-language writes the merged model as THE spm.model: a second load of the
// folder gives the same ids, and tokenizer.json says what each language got.
TEST_F(PerLanguage, TrainTokenizerWritesTheMergedModel) {
  const std::string dir = (fs::temp_directory_path() / ("merge_test_" + std::to_string(::getpid()))).string();
  TrainOptions o;
  o.vocab_size = 2000;
  o.threads = 2;
  o.vocab_allocation = "per-language";
  o.language_vocab = "bn:3,en:1";
  SampleSummary summary = sample_->summary;
  auto tok = train_tokenizer(*sample_, o, dir, &summary);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_EQ(summary.vocab.size(), 2u);
  EXPECT_EQ(summary.vocab[0].lang, "bn");
  EXPECT_DOUBLE_EQ(summary.vocab[0].share, 0.75);
  auto again = Tokenizer::load(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->hash(), tok->hash());
  std::ifstream meta(dir + "/" + kMetaFile);
  const lm::Json j = lm::Json::parse(meta);
  EXPECT_EQ(j["training"]["vocab"].size(), 2u);
  EXPECT_EQ(again->encode(texts_[0][0]), tok->encode(texts_[0][0]));
  o.language_vocab = "bn:3";
  auto missing = train_tokenizer(*sample_, o, dir, &summary);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("gives no share to 'en'"), std::string::npos) << missing.status();
  fs::remove_all(dir);
}

// The sweep (issue 31.3): one loadable tokenizer folder per size, trained on the same sample, and a
// row per size in which the larger vocabulary carries more text per token.
TEST_F(PerLanguage, SweepTrainsOneTokenizerPerSize) {
  const std::string dir = (fs::temp_directory_path() / ("sweep_test_" + std::to_string(::getpid()))).string();
  TrainOptions o;
  o.threads = 2;
  ReportOptions r;
  auto rows = sweep_vocab_sizes(*sample_, o, r, {1000, 3000}, dir);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0]["vocab_size"], 1000);
  EXPECT_LT((*rows)[0]["heldout_bn"].get<double>(), (*rows)[1]["heldout_bn"].get<double>());
  for (int v : {1000, 3000}) {
    auto tok = Tokenizer::load(dir + "/vocab-" + std::to_string(v));
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->vocab_size(), v);
  }
  const std::string table = format_sweep(*rows);
  EXPECT_NE(table.find("   1000 "), std::string::npos) << table;
  EXPECT_NE(table.find("        -"), std::string::npos) << table;  // no --parallel: its columns say so
  fs::remove_all(dir);
}

}  // namespace
