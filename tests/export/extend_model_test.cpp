// `lmtrain extend-model` (model/vocab_extension.h): rows, bytes, refusals, and no damage — the
// extended model's logits on base-vocabulary input, on the base columns, are bit-identical to the
// base's in lmforge's own fp32 forward. Against transformers with real vocabularies: suite
// ExtendModelPython (label hf, tests/export/extend_model_check.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "model/hf_export.h"
#include "model/hf_import.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "model/vocab_extension.h"

namespace lm::model {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kBase = 96, kAdded = 5;

class ExtendModel : public ::testing::Test {
 protected:
  void SetUp() override {
    init_output(/*quiet=*/true);
    root_ = fs::temp_directory_path() / ("lm_extend_model_test_" + std::to_string(getpid()));
    (void)remove_tree(root_.string());  // not fs::remove_all: see core/file.h
    fs::create_directories(root_);
  }
  void TearDown() override { (void)remove_tree(root_.string()); }

  static ModelConfig config(bool tied) {
    ModelConfig c = *preset("tiny");
    c.vocab_size = kBase;
    c.d_model = 32;
    c.d_ff = 64;
    c.tie_embeddings = tied;
    c.preset = "custom";
    return c;
  }
  // An HF folder of lmforge's own model stored as `dtype`; sharded: the embedding in one file,
  // the rest in another, with model.safetensors.index.json.
  fs::path base(const std::string& name, bool tied, torch::ScalarType dtype, bool sharded) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    const ModelConfig c = config(tied);
    Transformer m(c, 7);
    NamedTensors a, b;
    Json map = Json::object();
    for (auto& [n, t] : module_state(*m)) {
      const bool first = !sharded || n == "model.embed_tokens.weight";
      (first ? a : b).emplace_back(n, t.detach().to(dtype));
      map[n] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    if (sharded) {
      EXPECT_TRUE(save_safetensors((dir / "model-00001-of-00002.safetensors").string(), a, {{"format", "pt"}}).ok());
      EXPECT_TRUE(save_safetensors((dir / "model-00002-of-00002.safetensors").string(), b, {{"format", "pt"}}).ok());
      Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
      EXPECT_TRUE(write_file_atomic((dir / "model.safetensors.index.json").string(), index.dump()).ok());
    } else {
      EXPECT_TRUE(save_safetensors((dir / "model.safetensors").string(), a, {{"format", "pt"}}).ok());
    }
    EXPECT_TRUE(write_file_atomic((dir / "config.json").string(), hf_config_json(c, SpecialTokens{}, "bf16").dump()).ok());
    EXPECT_TRUE(write_file_atomic((dir / "generation_config.json").string(), "{\"bos_token_id\": 1}").ok());
    return dir;
  }
  // extension.json: new ids kBase.. with pieces, one (the last) without any.
  fs::path tokenizer(const std::string& name) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    Json toks = Json::array();
    for (int64_t i = 0; i < kAdded; ++i) {
      Json pieces = i + 1 == kAdded ? Json::array() : Json{3 + i, 40 + 2 * i, 3 + i};
      toks.push_back({{"id", kBase + i}, {"token", "t" + std::to_string(i)}, {"bytes_hex", "00"}, {"base_pieces", pieces}});
    }
    Json ext = {{"format", kVocabExtensionFormat}, {"base_tokenizer_hash", "0123456789abcdef"},
                {"base_vocab_size", kBase}, {"vocab_size", kBase + kAdded}, {"split", "gpt-4o"}, {"new_tokens", toks}};
    EXPECT_TRUE(write_json_file((dir / "extension.json").string(), ext).ok());
    EXPECT_TRUE(write_file_atomic((dir / "hf-tokenizer.json").string(), "{\"model\": {\"type\": \"BPE\"}}").ok());
    return dir;
  }
  ExtendModelOptions options(const fs::path& hf, const fs::path& tok, const std::string& out) const {
    ExtendModelOptions o;
    o.hf_dir = hf.string();
    o.tokenizer_dir = tok.string();
    o.out = (root_ / out).string();
    o.base_tokenizer_hash = "0123456789abcdef";
    return o;
  }
  // Not through fs::directory_iterator: the torch wheel's static std::filesystem copy (core/file.h).
  static std::map<std::string, torch::Tensor> tensors(const fs::path& dir) {
    std::map<std::string, torch::Tensor> out;
    for (const char* f : {"model.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      if (!fs::exists(dir / f)) continue;
      auto file = load_safetensors((dir / f).string());
      EXPECT_TRUE(file.ok()) << file.status();
      if (file.ok()) for (auto& [n, t] : file->tensors) out[n] = t;
    }
    return out;
  }
  fs::path root_;
};

// Old rows and every other tensor keep their bytes; new rows are their pieces' mean (expected
// here in fp64: within one rounding of the stored dtype); the row without pieces is the fallback
// normal around the old rows' mean (1e-9 x covariance: a few 1e-5 away at most).
void expect_rows(const std::map<std::string, torch::Tensor>& before, const std::map<std::string, torch::Tensor>& after) {
  for (const auto& [name, old] : before) {
    const torch::Tensor& now = after.at(name);
    EXPECT_EQ(now.scalar_type(), old.scalar_type()) << name;
    if (name != "model.embed_tokens.weight" && name != "lm_head.weight") {
      EXPECT_TRUE(torch::equal(now, old)) << name;
      continue;
    }
    ASSERT_EQ(now.size(0), kBase + kAdded) << name;
    EXPECT_TRUE(torch::equal(now.narrow(0, 0, kBase), old)) << name << ": old rows changed";
    const double ulp = old.scalar_type() == torch::kBFloat16 ? 1.0 / 128 : 1e-6;
    const auto old64 = old.to(torch::kFloat64);
    for (int64_t i = 0; i + 1 < kAdded; ++i) {
      const auto want = (old64[3 + i] * 2 + old64[40 + 2 * i]) / 3;
      const auto got = now[kBase + i].to(torch::kFloat64);
      const double err = ((got - want).abs() / (want.abs() + 1e-30)).max().item<double>();
      EXPECT_LE(err, ulp) << name << " row " << kBase + i;
    }
    const auto mean = old64.mean(0);
    const double off = (now[kBase + kAdded - 1].to(torch::kFloat64) - mean).abs().max().item<double>();
    EXPECT_LT(off, 1e-3 + ulp * mean.abs().max().item<double>()) << name << ": the fallback row";
  }
}

// Base ids through both models in fp32: the base columns of the extended logits equal the base
// logits bit for bit (the same bytes in every weight the base columns read).
void expect_no_damage(const fs::path& base_dir, const std::string& ext_dir) {
  torch::NoGradGuard ng;
  auto a = import_hf(base_dir.string());
  auto b = import_hf(ext_dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->config().vocab_size, kBase + kAdded);
  (*a)->eval();
  (*b)->eval();
  torch::manual_seed(3);
  const auto ids = torch::randint(0, kBase, {2, 24}, torch::kInt64);
  const auto la = (*a)->forward(ids), lb = (*b)->forward(ids);
  const auto cols = lb.narrow(-1, 0, kBase);
  std::printf("  max |logit diff| on the base columns: %.3e\n", (cols - la).abs().max().item<double>());
  EXPECT_TRUE(torch::equal(cols, la)) << "logits on the base columns changed";
}

TEST_F(ExtendModel, UntiedShardedBf16GrowsBothMatricesWithoutDamage) {
  const auto hf = base("base", /*tied=*/false, torch::kBFloat16, /*sharded=*/true);
  const auto tok = tokenizer("tok");
  auto r = extend_hf_model(options(hf, tok, "ext"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grown.size(), 2u);
  EXPECT_EQ(r->from_pieces, kAdded - 1);
  EXPECT_EQ(r->from_normal, 1);
  const fs::path out = root_ / "ext";
  expect_rows(tensors(hf), tensors(out));
  const Json cfg = *read_json_file((out / "config.json").string());
  EXPECT_EQ(cfg["vocab_size"], kBase + kAdded);
  const Json index = *read_json_file((out / "model.safetensors.index.json").string());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), r->bytes_written);
  EXPECT_EQ(*read_file((out / "tokenizer.json").string()), *read_file((tok / "hf-tokenizer.json").string()));
  EXPECT_TRUE(fs::exists(out / "extension.json"));
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  expect_no_damage(hf, out.string());
}

TEST_F(ExtendModel, TiedFp32GrowsTheEmbeddingWithoutDamage) {
  const auto hf = base("base", /*tied=*/true, torch::kFloat32, /*sharded=*/false);
  auto r = extend_hf_model(options(hf, tokenizer("tok"), "ext"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->grown, std::vector<std::string>{"model.embed_tokens.weight"});
  expect_rows(tensors(hf), tensors(root_ / "ext"));
  expect_no_damage(hf, (root_ / "ext").string());
}

// A SentencePiece base (Llama 2): the extended tokenizer.model goes into OUT, and the base's own
// tokenizer.json (Llama 2 ships one, in the old vocabulary) does not.
TEST_F(ExtendModel, SentencePieceTokenizerModelIsCopiedAndTheBasesTokenizerJsonIsNot) {
  const auto hf = base("base", /*tied=*/true, torch::kFloat32, /*sharded=*/false);
  ASSERT_TRUE(write_file_atomic((hf / "tokenizer.json").string(), "{\"the base's\": 1}").ok());
  const auto tok = tokenizer("tok");
  fs::remove(tok / "hf-tokenizer.json");
  ASSERT_TRUE(write_file_atomic((tok / "tokenizer.model").string(), std::string("spm\0bytes", 9)).ok());
  auto r = extend_hf_model(options(hf, tok, "ext"));
  ASSERT_TRUE(r.ok()) << r.status();
  const fs::path out = root_ / "ext";
  EXPECT_EQ(*read_file((out / "tokenizer.model").string()), std::string("spm\0bytes", 9));
  EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
  fs::remove(tok / "tokenizer.model");
  auto none = extend_hf_model(options(hf, tok, "ext2"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no hf-tokenizer.json or tokenizer.model"), std::string::npos) << none.status();
}

// Every refusal names what is wrong and leaves nothing behind (no OUT, no OUT.partial-*).
TEST_F(ExtendModel, RefusesForeignTokenizersExtendedCheckpointsAndAnExistingOut) {
  const auto hf = base("base", false, torch::kBFloat16, false);
  const auto tok = tokenizer("tok");
  auto expect_refused = [&](ExtendModelOptions o, const std::string& said) {
    auto r = extend_hf_model(o);
    ASSERT_FALSE(r.ok()) << said;
    EXPECT_NE(r.status().message().find(said), std::string::npos) << r.status();
  };
  ExtendModelOptions o = options(hf, tok, "ext");
  o.base_tokenizer_hash = "ffffffffffffffff";
  expect_refused(o, "is not an extension of this checkpoint's");
  Json ext = *read_json_file((tok / "extension.json").string());
  ext["base_vocab_size"] = kBase - 1;  // ids kBase.. still new rows of it
  const auto other = root_ / "tok-other";
  fs::create_directories(other);
  ASSERT_TRUE(write_json_file((other / "extension.json").string(), ext).ok());
  expect_refused(options(hf, other, "ext"), "base_vocab_size is 95 but");
  ext = *read_json_file((tok / "extension.json").string());
  ext["new_tokens"][1]["base_pieces"] = {kBase};
  ASSERT_TRUE(write_json_file((other / "extension.json").string(), ext).ok());
  expect_refused(options(hf, other, "ext"), "new_tokens[1].base_pieces: 96 is not a base id");
  EXPECT_FALSE(fs::exists(root_ / "ext"));
  ASSERT_TRUE(extend_hf_model(options(hf, tok, "ext")).ok());
  expect_refused(options(hf, tok, "ext"), "--force");
  expect_refused(options(root_ / "ext", tok, "ext2"), "already extended");
  ExtendModelOptions f = options(hf, tok, "ext");
  f.force = true;
  EXPECT_TRUE(extend_hf_model(f).ok());
  EXPECT_FALSE(fs::exists(root_ / ("ext.partial-" + std::to_string(getpid()))));
  EXPECT_FALSE(fs::exists(root_ / ("ext.old-" + std::to_string(getpid()))));
}

}  // namespace
}  // namespace lm::model
