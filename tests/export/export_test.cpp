// Hugging Face export, --init-from, KV-cache generation and the run report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <zlib.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "model/generate.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tests/train/synthetic_source.h"
#include "train/checkpoint.h"
#include "model/hf_export.h"
#include "model/hf_tokenizer.h"
#include "train/optim.h"
#include "report/fonts.h"
#include "report/plot.h"
#include "report/report.h"
#include "report/tables.h"
#include "core/run_folder.h"
#include "train/trainer.h"
#include "corpus/corpus.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/train.h"

#define LM_ASSERT_OK(expr)                         \
  do {                                             \
    const auto& lm_st_ = (expr);                   \
    ASSERT_TRUE(lm_st_.ok()) << lm_st_.ToString(); \
  } while (0)

namespace lm::train {
namespace {
namespace fs = std::filesystem;
// The exports live in lm::model (model/hf_export.h, model/hf_tokenizer.h) since they moved beside the model.
using namespace lm::model;

fs::path temp_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_export_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

model::ModelConfig tiny(bool tied = true) {
  auto c = *model::preset("tiny");  // GQA: 4 query heads share 2 kv heads
  c.tie_embeddings = tied;
  return c;
}

// A tokenizer folder with the project's special ids and the framing `lmtrain tokenizer` records
// (framing null: none, as a tokenizer.json written before it was recorded). The exporter copies
// spm.model byte for byte and reads only the ids and the framing, so placeholder bytes are enough.
void write_tokenizer(const fs::path& run, const Json& framing = Json{{"bos", true}, {"eos", true}}) {
  fs::create_directories(run / "tokenizer");
  ASSERT_TRUE(write_file_atomic((run / "tokenizer/spm.model").string(), "placeholder spm bytes").ok());
  Json meta = {{"unk_id", 0}, {"bos_id", 1}, {"eos_id", 2}, {"pad_id", 3}, {"vocab_size", 512}};
  if (!framing.is_null()) meta["framing"] = framing;
  ASSERT_TRUE(write_json_file((run / "tokenizer/tokenizer.json").string(), meta).ok());
}

// A run folder as `lmtrain fit` leaves it, holding `m` as the checkpoint of `step`.
void make_run(const fs::path& run, model::Transformer& m, int64_t step = 7, const Json& data = Json()) {
  FitRequest req;
  req.run_dir = run.string();
  req.data_info = data;
  req.model = m->config();
  const std::string spm = "placeholder spm bytes";  // write_tokenizer's spm.model: config.json records its hash
  req.tokenizer_hash = hex64(fnv1a64(spm.data(), spm.size()));
  ASSERT_TRUE(write_json_file((run / "config.json").string(), run_config_json(req)).ok());
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value());
  AdamW opt(params, req.train);
  Json state = {{"step", step}, {"tokens", step * 1000}, {"data_cursor", Json::object()},
                {"config", run_config_json(req)}, {"tokenizer_hash", "tok-test"}, {"world_size", 1}};
  ASSERT_TRUE(save_checkpoint(run.string(), step, m, opt, state, 3).ok());
  write_tokenizer(run);
}

torch::Tensor fixed_ids(int64_t T, int64_t V) {
  return (torch::arange(T, torch::kInt64) * 37 + 11).remainder(V).unsqueeze(0);  // [1, T]
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override { init_output(/*quiet=*/true); torch::manual_seed(0); }
};

// --- KV cache -------------------------------------------------------------------------------

void expect_cache_matches(bool tied) {
  model::Transformer m(tiny(tied));
  m->init_weights(3);
  m->eval();
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 512, {2, 40}, torch::kInt64);
  auto full = m->forward(ids);  // [2, 40, V]
  model::KVCache cache;
  std::vector<torch::Tensor> parts = {m->forward_cached(ids.narrow(1, 0, 9), cache)};  // prefill 9
  for (int64_t t = 9; t < 40; ++t) parts.push_back(m->forward_cached(ids.narrow(1, t, 1), cache));
  EXPECT_EQ(cache.length, 40);
  auto cached = torch::cat(parts, 1);
  // fp32; the cached path sums the same products in the same order up to the masked tail, so
  // differences are rounding only (~1e-6 observed); 1e-5 leaves room for other BLAS builds.
  const double err = (cached - full).abs().max().item<double>();
  EXPECT_LT(err, 1e-5) << "tied=" << tied;
}

TEST_F(ExportTest, KvCacheLogitsEqualFullForward) {
  expect_cache_matches(true);
  expect_cache_matches(false);
}

TEST_F(ExportTest, KvCacheRejectsOverflow) {
  model::Transformer m(tiny());
  m->eval();
  torch::NoGradGuard ng;
  model::KVCache cache;
  m->forward_cached(torch::zeros({1, 120}, torch::kInt64), cache);
  EXPECT_THROW(m->forward_cached(torch::zeros({1, 9}, torch::kInt64), cache), c10::Error);
}

TEST_F(ExportTest, GreedyWithCacheEqualsWithoutTokenForToken) {
  auto cfg = tiny();
  cfg.init_std = 0.5;  // sharp, varied logits: a 0.02 init greedily repeats one token
  model::Transformer m(cfg);
  m->init_weights(5);
  model::SampleOptions o;
  o.max_new_tokens = 60;
  const std::vector<int32_t> prompt = {1, 17, 99, 230, 4, 77};
  o.use_cache = true;
  auto a = model::generate(m, prompt, o, /*keep_logits=*/true);
  auto a2 = model::generate(m, prompt, o);
  o.use_cache = false;
  auto b = model::generate(m, prompt, o, /*keep_logits=*/true);
  ASSERT_EQ(a.tokens.size(), 60u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens, a2.tokens);  // deterministic
  double err = 0, scale = 1;
  for (size_t i = 0; i < a.logits.size(); ++i)
    for (size_t v = 0; v < a.logits[i].size(); ++v) {
      err = std::max<double>(err, std::fabs(a.logits[i][v] - b.logits[i][v]));
      scale = std::max<double>(scale, std::fabs(b.logits[i][v]));
    }
  // Relative to the largest logit (~1e2 with this init): fp32 rounding of differently shaped
  // matmuls is ~1e-7 relative; 1e-5 is far below any gap that could flip an argmax here.
  EXPECT_LT(err / scale, 1e-5) << "max |diff| " << err << " at logit scale " << scale;
  EXPECT_GT(a.tokens_per_s, 0);
  std::set<int32_t> distinct(a.tokens.begin(), a.tokens.end());
  EXPECT_GT(distinct.size(), 1u);  // not a degenerate constant stream
}

TEST_F(ExportTest, GenerationStopsAtEosAndAtTheContext) {
  auto cfg = tiny();
  cfg.init_std = 0.5;
  model::Transformer m(cfg);
  m->init_weights(5);
  model::SampleOptions o;
  o.max_new_tokens = 60;
  const std::vector<int32_t> prompt = {1, 17, 99, 230, 4, 77};
  const auto free_run = model::generate(m, prompt, o);
  ASSERT_EQ(free_run.tokens.size(), 60u);
  for (bool cache : {true, false}) {
    o.use_cache = cache;
    o.eos_id = free_run.tokens[7];  // pretend the 8th greedy token is eos: stop right after it
    const size_t first = std::find(free_run.tokens.begin(), free_run.tokens.end(), o.eos_id) - free_run.tokens.begin();
    auto g = model::generate(m, prompt, o);
    EXPECT_TRUE(g.stopped_at_eos) << "cache=" << cache;
    EXPECT_EQ(g.tokens, std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + first + 1));
    o.eos_id = -1;
    o.max_new_tokens = 1000;  // context 128: fed prompt 6 + 122 new, then the 123rd from position 128
    auto c = model::generate(m, prompt, o);
    EXPECT_TRUE(c.stopped_at_context);
    EXPECT_EQ(static_cast<int64_t>(prompt.size() + c.tokens.size()), cfg.max_seq_len + 1) << "cache=" << cache;
    o.max_new_tokens = 60;
  }
}

TEST_F(ExportTest, SamplingIsSeededAndTopPRestricts) {
  model::Transformer m(tiny());
  m->init_weights(5);
  model::SampleOptions o;
  o.max_new_tokens = 30;
  o.temperature = 1.0;
  o.top_p = 0.9;
  o.seed = 42;
  auto a = model::generate(m, {1, 2, 3}, o), b = model::generate(m, {1, 2, 3}, o);
  EXPECT_EQ(a.tokens, b.tokens);
  o.seed = 43;
  EXPECT_NE(model::generate(m, {1, 2, 3}, o).tokens, a.tokens);
  // top_p tiny keeps only the argmax: sampling equals greedy.
  auto logits = torch::tensor({0.1f, 2.0f, 1.9f, -1.0f});
  uint64_t rng = 7;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(model::pick_token(logits, 1.0, 1e-6, &rng), 1);
  int seen2 = 0;
  for (int i = 0; i < 200; ++i) seen2 += model::pick_token(logits, 1.0, 1.0, &rng) == 2;
  EXPECT_GT(seen2, 40);  // p(2) ~ 0.43 with full nucleus
}

// --- export ---------------------------------------------------------------------------------

TEST_F(ExportTest, ExportRoundTripTensorsAndConfig) {
  for (bool tied : {true, false}) {
    const auto run = temp_dir(tied ? "run_tied" : "run_untied");
    model::Transformer m(tiny(tied));
    m->init_weights(11);
    make_run(run, m);
    for (std::string dtype : {"fp32", "bf16"}) {
      ExportOptions o{run.string(), -1, (run / ("hf_" + dtype)).string(), dtype};
      auto r = export_hf(o);
      LM_ASSERT_OK(r.status());
      EXPECT_EQ(r->step, 7);
      auto f = model::load_safetensors(o.out + "/model.safetensors");
      LM_ASSERT_OK(f.status());
      std::map<std::string, torch::Tensor> got(f->tensors.begin(), f->tensors.end());
      auto want = model::module_state(*m);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(got.count("lm_head.weight"), tied ? 0u : 1u);
      EXPECT_EQ(got.count("model.layers.1.self_attn.k_proj.weight"), 1u);
      for (auto& [name, t] : want) {
        ASSERT_EQ(got.count(name), 1u) << name;
        const auto& g = got[name];
        EXPECT_EQ(g.scalar_type(), dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32) << name;
        EXPECT_EQ(g.sizes(), t.sizes()) << name;  // HF Linear layout [out, in], unpermuted
        // bit-exact: fp32 copies; bf16 equals the same rounding of the fp32 weights.
        EXPECT_TRUE(torch::equal(g, t.to(g.scalar_type()))) << name;
      }
      auto cfg = read_json_file(o.out + "/config.json");
      LM_ASSERT_OK(cfg.status());
      auto c = *cfg;  // a copy: operator[] on a missing key gives null, not UB
      EXPECT_EQ(c["architectures"][0], "LlamaForCausalLM");
      EXPECT_EQ(c["model_type"], "llama");
      EXPECT_EQ(c["hidden_size"], 64);
      EXPECT_EQ(c["intermediate_size"], 192);
      EXPECT_EQ(c["num_hidden_layers"], 2);
      EXPECT_EQ(c["num_attention_heads"], 4);
      EXPECT_EQ(c["num_key_value_heads"], 2);
      EXPECT_EQ(c["max_position_embeddings"], 128);
      EXPECT_EQ(c["vocab_size"], 512);
      EXPECT_EQ(c["tie_word_embeddings"], tied);
      EXPECT_EQ(c["bos_token_id"], 1);
      EXPECT_EQ(c["eos_token_id"], 2);
      EXPECT_EQ(c["pad_token_id"], 3);
      EXPECT_EQ(c["torch_dtype"], dtype == "bf16" ? "bfloat16" : "float32");
      EXPECT_EQ(c["hidden_act"], "silu");
      EXPECT_EQ(c["attention_bias"], false);
      EXPECT_EQ(c["mlp_bias"], false);
      EXPECT_DOUBLE_EQ(c["rope_theta"].get<double>(), 10000.0);
      EXPECT_DOUBLE_EQ(c["rms_norm_eps"].get<double>(), 1e-5);
      auto back = hf_model_config(c, "config.json");
      LM_ASSERT_OK(back.status());
      EXPECT_EQ(back->n_kv_heads, 2);
      EXPECT_EQ(back->tie_embeddings, tied);
      auto tc = read_json_file(o.out + "/tokenizer_config.json");
      LM_ASSERT_OK(tc.status());
      // A placeholder tokenizer.model: no tokenizer.json, LlamaTokenizer converts it (model/hf_tokenizer.h).
      EXPECT_EQ((*tc)["tokenizer_class"], "LlamaTokenizer");
      EXPECT_FALSE(fs::exists(o.out + "/tokenizer.json"));
      EXPECT_EQ((*tc)["add_bos_token"], true);
      EXPECT_EQ((*tc)["bos_token"], "<s>");
      EXPECT_EQ(*read_file(o.out + "/tokenizer.model"), "placeholder spm bytes");
      EXPECT_EQ((*tc)["eos_token"], "</s>");
      EXPECT_EQ((*tc)["add_eos_token"], false);
      // generate() in transformers stops at generation_config's eos and starts from its bos.
      auto gc = read_json_file(o.out + "/generation_config.json");
      LM_ASSERT_OK(gc.status());
      EXPECT_EQ((*gc)["bos_token_id"], 1);
      EXPECT_EQ((*gc)["eos_token_id"], 2);
      EXPECT_EQ((*gc)["pad_token_id"], 3);
      EXPECT_FALSE(gc->contains("max_length")) << gc->dump();  // transformers 5 warns on every generate with it
      EXPECT_EQ((*gc)["do_sample"], false);
      auto stm = read_json_file(o.out + "/special_tokens_map.json");
      LM_ASSERT_OK(stm.status());
      EXPECT_EQ(*stm, (Json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}}));
      const std::string card = *read_file(o.out + "/README.md");
      EXPECT_NE(card.find("| layers / d_model / heads / kv heads | 2 / 64 / 4 / 2 |"), std::string::npos) << card;
      EXPECT_NE(card.find(std::string("| tied embeddings | ") + (tied ? "yes" : "no") + " |"), std::string::npos);
      // The card says what the dtype means next to lmeval on the run (issue 30 item 4).
      EXPECT_NE(card.find("Precision: " + precision_note(dtype)), std::string::npos) << card;
      EXPECT_NE(precision_note(dtype).find(dtype), std::string::npos);
      EXPECT_EQ(card.find("--dtype fp32") != std::string::npos, dtype == "bf16") << card;
    }
  }
}

// Issue 30 item 16: the card a user publishes had a placeholder link, "PATH" in its code, no
// license field and this machine's absolute paths in raw JSON.
TEST_F(ExportTest, ModelCardHasALicenseAndNoPlaceholdersOrLocalPaths) {
  const auto run = temp_dir("card_paths");
  model::Transformer m(tiny(true));
  m->init_weights(3);
  const Json data = {{"shards", "/home/someone/corpora/shards-v1"}, {"tokenizer", "/home/someone/tok32k"},
                     {"shards_id", "abc123"}, {"earlier_shards", {"/home/someone/corpora/shards-v0"}}};
  make_run(run, m, 7, data);
  for (const std::string license : {"", "apache-2.0"}) {
    ExportOptions o{run.string(), -1, (run / ("hf" + license)).string(), "fp32"};
    o.license = license;
    LM_ASSERT_OK(export_hf(o).status());
    const std::string card = *read_file(o.out + "/README.md");
    SCOPED_TRACE(card);
    EXPECT_NE(card.find("\nlicense: " + (license.empty() ? std::string("unknown") : license) + "\n"), std::string::npos);
    EXPECT_NE(card.find("## License"), std::string::npos);
    for (const std::string& bad : std::vector<std::string>{"\"PATH\"", "https://github.com/)", "/home/someone", run.string(), "{\""})
      EXPECT_EQ(card.find(bad), std::string::npos) << "the card holds '" << bad << "'";
    EXPECT_NE(card.find("token shards `shards-v1` (shards id `abc123`), continued from `shards-v0`; tokenizer `tok32k`"),
              std::string::npos);
    EXPECT_NE(card.find("path = \"hf" + license + "\""), std::string::npos);
  }
  ExportOptions bad{run.string(), -1, (run / "hf_bad").string(), "fp32"};
  bad.license = "apache 2.0\nlicense: mit";
  EXPECT_EQ(export_hf(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Splits a markdown table row "| a | b |" into its cells.
std::vector<std::string> md_cells(const std::string& line) {
  std::vector<std::string> out;
  size_t p = line.find('|');
  while (p != std::string::npos) {
    const size_t q = line.find('|', p + 1);
    if (q == std::string::npos) break;
    std::string c = line.substr(p + 1, q - p - 1);
    c.erase(0, c.find_first_not_of(' '));
    c.erase(c.find_last_not_of(' ') + 1);
    out.push_back(c);
    p = q;
  }
  return out;
}

// The card's row that starts with `key`, as cells (empty when absent).
std::vector<std::string> card_row(const std::string& card, const std::string& key) {
  std::istringstream in(card);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("| " + key + " |", 0) == 0) return md_cells(line);
  return {};
}

std::string f4(double v) { return absl::StrFormat("%.4f", v); }

// The model card's NLL and MC tables print the eval JSON's numbers (docs/eval.md layout), each
// in its own column: values with 7 decimals so rounding and column order both show.
TEST_F(ExportTest, ModelCardTablesComeFromEvalJson) {
  const auto run = temp_dir("card");
  model::Transformer m(tiny());
  make_run(run, m, 5);
  fs::create_directories(run / "eval");
  auto side = [](double npt, double bpb, double tokens) {
    return Json{{"nats_per_token", npt}, {"bits_per_byte", bpb}, {"tokens", tokens}};
  };
  Json nll = {{"step", 5},
              {"languages",
               {{"bn", {{"model", side(6.3425558, 1.0216765, 13138)}, {"twin", side(9.0413353, 1.4564034, 13138)},
                        {"twin_minus_model", {{"nats_per_token", 2.6987794}}}}},
                {"en", {{"model", side(5.0630332, 2.4526006, 8177)}, {"twin", side(9.0001594, 4.3597970, 8177)},
                        {"twin_minus_model", {{"nats_per_token", 3.9371262}}}}}}}};
  Json mc = {{"step", 5},
             {"tasks",
              {{"copa", {{"n", 100}, {"chance", 0.5}, {"acc", 0.5712}, {"acc_stderr", 0.0497531}, {"acc_norm", 0.5544},
                         {"twin", {{"acc", 0.4911}, {"acc_norm", 0.4822}}}, {"paired_acc", {{"p_value", 0.2101135}}}}}}}};
  LM_ASSERT_OK(write_json_file((run / "eval/nll.json").string(), nll));
  LM_ASSERT_OK(write_json_file((run / "eval/mc.json").string(), mc));
  const std::string hf = (run / "hf").string();
  LM_ASSERT_OK(export_hf({run.string(), -1, hf, "fp32"}).status());
  const std::string card = *read_file(hf + "/README.md");
  for (const char* lang : {"bn", "en"}) {
    const Json& v = nll["languages"][lang];
    const std::vector<std::string> want = {lang,
                                           absl::StrFormat("%.0f", v["model"]["tokens"].get<double>()),
                                           f4(v["model"]["nats_per_token"]),
                                           f4(v["twin"]["nats_per_token"]),
                                           f4(v["twin_minus_model"]["nats_per_token"]),
                                           f4(v["model"]["bits_per_byte"]),
                                           f4(v["twin"]["bits_per_byte"])};
    EXPECT_EQ(card_row(card, lang), want) << card;
  }
  const Json& c = mc["tasks"]["copa"];
  const std::vector<std::string> want = {"copa", "100", f4(c["chance"]), f4(c["acc"]), f4(c["acc_stderr"]),
                                         f4(c["twin"]["acc"]), f4(c["acc_norm"]), f4(c["twin"]["acc_norm"]),
                                         f4(c["paired_acc"]["p_value"])};
  EXPECT_EQ(card_row(card, "copa"), want) << card;
  EXPECT_NE(card.find("Held-out NLL at step 5"), std::string::npos);
  // Header cells name the columns in the same order the rows were checked in.
  EXPECT_NE(card.find("| language | tokens | nats/token | twin nats/token | twin − model | bits/byte | twin bits/byte |"),
            std::string::npos);
  EXPECT_NE(card.find("| task | n | chance | acc | ± | twin acc | acc_norm | twin acc_norm | p |"), std::string::npos);
}

// RFC 4648 section 10 test vectors (tokenizer.json stores SentencePiece's charsmap in base64).
TEST(HfTokenizer, Base64Rfc4648Vectors) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foob"), "Zm9vYg==");
  EXPECT_EQ(base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\xff\x00\xfe", 3)), "/wD+");
}

// A hand-encoded ModelProto: pieces <unk>(UNKNOWN) <s>(CONTROL) ▁a(NORMAL, -1.5), trainer_spec
// model_type 1 + byte_fallback, normalizer_spec add_dummy_prefix 1, remove_extra_whitespaces 0.
TEST(HfTokenizer, JsonFromHandEncodedModelProto) {
  auto piece = [](const std::string& text, float score, int type) {
    std::string m = std::string("\x0a") + char(text.size()) + text + "\x15";
    char f[4];
    std::memcpy(f, &score, 4);
    m.append(f, 4);
    m += std::string("\x18") + char(type);
    return std::string("\x0a") + char(m.size()) + m;
  };
  std::string proto = piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece("\xe2\x96\x81" "a", -1.5f, 1);
  proto += std::string("\x12\x05\x18\x01\x98\x02\x01", 7);  // trainer_spec {3: 1, 35: 1}
  proto += std::string("\x1a\x04\x18\x01\x20\x00", 6);         // normalizer_spec {3: 1, 4: 0}
  SpecialTokens sp;
  auto j = hf_tokenizer_json(proto, sp, "hand");
  LM_ASSERT_OK(j.status());
  EXPECT_EQ((*j)["model"]["type"], "Unigram");
  EXPECT_EQ((*j)["model"]["byte_fallback"], true);
  ASSERT_EQ((*j)["model"]["vocab"].size(), 3u);
  EXPECT_EQ((*j)["model"]["vocab"][2][0], "\xe2\x96\x81" "a");
  EXPECT_DOUBLE_EQ((*j)["model"]["vocab"][2][1].get<double>(), -1.5);
  EXPECT_EQ((*j)["added_tokens"].size(), 2u);  // <unk> and <s>, not the normal piece
  // remove_extra_whitespaces 0: only the space escaping; no charsmap in this proto.
  ASSERT_EQ((*j)["normalizer"]["normalizers"].size(), 1u);
  EXPECT_EQ((*j)["pre_tokenizer"]["pretokenizers"][0]["prepend_scheme"], "first");
  EXPECT_EQ((*j)["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  EXPECT_EQ(hf_tokenizer_json("placeholder", sp, "x").status().code(), absl::StatusCode::kDataLoss);
  sp.add_bos = false;  // the framing text + eos: the text alone, no post-processor adds BOS
  auto plain = hf_tokenizer_json(proto, sp, "hand");
  LM_ASSERT_OK(plain.status());
  EXPECT_TRUE((*plain)["post_processor"].is_null());
}

// Issue 21 point 7: tokenizer_config's add_bos_token is the run tokenizer's framing: true for
// bos + text + eos (recorded by `lmtrain tokenizer`), false for a tokenizer.json without "framing"
// (text + eos, what such a tokenizer's shards hold); add_eos_token is false either way.
TEST_F(ExportTest, TokenizerConfigFollowsTheFraming) {
  const auto run = temp_dir("framing");
  model::Transformer m(tiny());
  m->init_weights(2);
  make_run(run, m);
  for (const Json& framing : {Json{{"bos", true}, {"eos", true}}, Json(nullptr), Json{{"bos", false}, {"eos", true}}}) {
    write_tokenizer(run, framing);
    const bool bos = !framing.is_null() && framing["bos"].get<bool>();
    auto sp = read_special_tokens((run / "tokenizer/tokenizer.json").string());
    LM_ASSERT_OK(sp.status());
    EXPECT_EQ(sp->add_bos, bos) << framing;
    const std::string out = (run / ("hf_" + std::to_string(bos) + framing.dump().substr(0, 1))).string();
    LM_ASSERT_OK(export_hf({run.string(), -1, out, "fp32"}).status());
    auto tc = read_json_file(out + "/tokenizer_config.json");
    LM_ASSERT_OK(tc.status());
    EXPECT_EQ((*tc)["add_bos_token"], bos) << framing;
    EXPECT_EQ((*tc)["add_eos_token"], false) << framing;
  }
  write_tokenizer(run, Json{{"bos", "yes"}});
  auto bad = read_special_tokens((run / "tokenizer/tokenizer.json").string());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_NE(bad.status().message().find("framing.bos"), std::string::npos) << bad.status();
}

TEST_F(ExportTest, ExportErrorsNameTheProblem) {
  const auto run = temp_dir("bad");
  auto r = export_hf({run.string(), -1, (run / "hf").string(), "fp32"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  model::Transformer m(tiny());
  make_run(run, m);
  r = export_hf({run.string(), -1, (run / "hf").string(), "fp16"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("--dtype"), std::string::npos);
  fs::remove(run / "tokenizer/spm.model");
  r = export_hf({run.string(), -1, (run / "hf").string(), "fp32"});
  EXPECT_NE(std::string(r.status().message()).find("spm.model"), std::string::npos) << r.status();
}

TEST_F(ExportTest, InitFromLoadsWeightsAndRejectsOtherArchitectures) {
  const auto run = temp_dir("init");
  model::Transformer m(tiny());
  m->init_weights(21);
  make_run(run, m);
  const std::string hf = (run / "hf").string();
  LM_ASSERT_OK(export_hf({run.string(), -1, hf, "fp32"}).status());
  model::Transformer fresh(tiny());
  fresh->init_weights(99);
  LM_ASSERT_OK(init_from_hf(hf, fresh));
  auto a = model::module_state(*m), b = model::module_state(*fresh);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  auto other_cfg = tiny();
  other_cfg.d_ff = 256;
  model::Transformer other(other_cfg);
  auto st = init_from_hf(hf, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("intermediate_size"), std::string::npos) << st;
  EXPECT_EQ(init_from_hf((run / "nowhere").string(), fresh).code(), absl::StatusCode::kNotFound);
}

TEST_F(ExportTest, FitInitFromStartsFromExportedWeights) {
  const auto run = temp_dir("fit_src");
  model::Transformer m(tiny());
  m->init_weights(31);
  make_run(run, m);
  const std::string hf = (run / "hf").string();
  LM_ASSERT_OK(export_hf({run.string(), -1, hf, "fp32"}).status());
  FitRequest r;
  r.run_dir = (temp_dir("fit_dst") / "run").string();
  r.model = tiny();
  r.train.steps = 1;
  r.train.batch.micro_batch = 2;
  r.train.batch.seq_len = 16;
  r.train.schedule.warmup_steps = 1;
  r.train.optimizer.lr = 1e-12;  // one step that moves weights by ~1e-12: the checkpoint is the init
  r.train.optimizer.weight_decay = 0;
  r.train.hardware.threads = 2;
  r.train.debug.verify_at_start = false;
  r.tokenizer_hash = "tok-test";
  r.init_from = hf;
  testing::SyntheticSource src(2, 17, 512);
  auto sum = fit(r, src, {});
  LM_ASSERT_OK(sum.status());
  model::Transformer after(tiny());
  LM_ASSERT_OK(load_model(*find_checkpoint(r.run_dir, -1), after));
  auto a = model::module_state(*m), b = model::module_state(*after);
  // Adam's first step moves each weight by ~lr = 1e-12; a fresh init differs by ~0.02.
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LT((a[i].second - b[i].second).abs().max().item<double>(), 1e-6) << a[i].first;
  // A mismatched folder stops fit before training.
  r.run_dir = (temp_dir("fit_bad") / "run").string();
  r.model.d_ff = 256;
  testing::SyntheticSource src2(2, 17, 512);
  EXPECT_EQ(fit(r, src2, {}).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Logits of the exported folder computed by an independent Python reimplementation of
// transformers' LlamaForCausalLM (tests/export/hf_forward_check.py) equal lmforge's.
void python_check(bool tied) {
  if (std::system(LM_TEST_PYTHON " -c 'import torch' >/dev/null 2>&1") != 0) GTEST_SKIP() << LM_TEST_PYTHON " has no torch";
  const auto run = temp_dir(tied ? "py_tied" : "py_untied");
  model::Transformer m(tiny(tied));
  m->init_weights(tied ? 41 : 42);
  // Train-like weights: norms away from 1 so their layout matters too.
  {
    torch::NoGradGuard ng;
    for (auto& p : m->named_parameters())
      if (p.value().dim() == 1) p.value().uniform_(0.5, 1.5);
  }
  make_run(run, m);
  const std::string hf = (run / "hf").string();
  LM_ASSERT_OK(export_hf({run.string(), -1, hf, "fp32"}).status());
  m->eval();
  torch::NoGradGuard ng;
  auto ids = fixed_ids(48, 512).repeat({2, 1});
  ids[1] = ids[1].flip(0);
  auto logits = m->forward(ids);
  LM_ASSERT_OK(model::save_safetensors((run / "expected.safetensors").string(),
                                       {{"input_ids", ids}, {"logits", logits.contiguous()}}));
  const std::string cmd = LM_TEST_PYTHON " " LM_SOURCE_DIR "/tests/export/hf_forward_check.py " + hf + " " +
                          (run / "expected.safetensors").string();
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  if (WEXITSTATUS(rc) == 77) GTEST_SKIP() << "hf_forward_check.py skipped";
  EXPECT_EQ(WEXITSTATUS(rc), 0) << cmd;
}

TEST_F(ExportTest, PythonLlamaReferenceMatchesTied) { python_check(true); }
TEST_F(ExportTest, PythonLlamaReferenceMatchesUntied) { python_check(false); }

// Folders for tests/export/hf_transformers_check.py (ctest export_transformers_model,
// export_transformers_tokenizer, export_spm_tokenizer), which loads them with transformers /
// SentencePiece. DISABLED_: it runs only when that script asks for it (--gtest_also_run_disabled_tests)
// and writes under $LM_EXPORT_FIXTURE_DIR:
//   hf_tied/, hf_untied/ + *_expected.safetensors   fp32 exports and lmforge's logits [2, 48, V]
//   hf_gen/ + hf_gen_expected.json                   sharp init, lmforge's greedy tokens with the KV cache
//   hf_tok/ + hf_tok_expected.json                   a real tokenizer (trained on data/sample), lmforge's ids
TEST_F(ExportTest, DISABLED_WriteTransformersFixture) {
  const char* env = std::getenv("LM_EXPORT_FIXTURE_DIR");
  ASSERT_NE(env, nullptr) << "set LM_EXPORT_FIXTURE_DIR";
  // The fixture is rewritten on every run of the client checks: its exports replace the last ones
  // (--force; without it a second ctest run in the same build tree failed, export refusing its own
  // earlier output).
  const fs::path dir(env);
  fs::create_directories(dir);
  torch::NoGradGuard ng;
  for (bool tied : {true, false}) {
    const std::string name = tied ? "hf_tied" : "hf_untied";
    const fs::path run = dir / ("run_" + name);
    fs::remove_all(run);
    fs::create_directories(run);
    model::Transformer m(tiny(tied));
    m->init_weights(tied ? 41 : 42);
    for (auto& p : m->named_parameters())
      if (p.value().dim() == 1) p.value().uniform_(0.5, 1.5);  // norm layouts matter too
    make_run(run, m);
    LM_ASSERT_OK(export_hf({run.string(), -1, (dir / name).string(), "fp32", /*force=*/true}).status());
    m->eval();
    auto ids = fixed_ids(48, 512).repeat({2, 1});
    ids[1] = ids[1].flip(0);
    LM_ASSERT_OK(model::save_safetensors((dir / (name + "_expected.safetensors")).string(),
                                         {{"input_ids", ids}, {"logits", m->forward(ids).contiguous()}}));
  }
  {  // greedy generation: sharp logits (init 0.5) so no near-tie can flip an argmax
    auto cfg = tiny();
    cfg.init_std = 0.5;
    model::Transformer m(cfg);
    m->init_weights(5);
    const fs::path run = dir / "run_hf_gen";
    fs::remove_all(run);
    fs::create_directories(run);
    make_run(run, m);
    LM_ASSERT_OK(export_hf({run.string(), -1, (dir / "hf_gen").string(), "fp32", /*force=*/true}).status());
    model::SampleOptions o;
    o.max_new_tokens = 40;
    o.eos_id = 2;
    const std::vector<int32_t> prompt = {1, 17, 99, 230, 4, 77};
    auto g = model::generate(m, prompt, o);
    Json j = {{"prompt", prompt}, {"tokens", g.tokens}, {"max_new_tokens", o.max_new_tokens}, {"eos_id", 2}};
    LM_ASSERT_OK(write_json_file((dir / "hf_gen_expected.json").string(), j));
  }
  {  // a real SentencePiece model, so HF tokenizers can be compared with lmforge's encode()
    auto manifest = data::load_manifest(LM_SOURCE_DIR "/data/sample/corpus.json");
    LM_ASSERT_OK(manifest.status());
    tokenizer::TrainOptions to;
    to.vocab_size = 1000;
    to.sample_chars = 150000;
    to.threads = 2;
    auto sample = tokenizer::build_sample(*manifest, to);
    LM_ASSERT_OK(sample.status());
    const fs::path run = dir / "run_hf_tok";
    fs::remove_all(run);
    fs::create_directories(run);
    tokenizer::SampleSummary summary = sample->summary;
    auto tok = tokenizer::train_tokenizer(*sample, to, (run / "tokenizer").string(), &summary);
    LM_ASSERT_OK(tok.status());
    auto cfg = tiny();
    cfg.vocab_size = tok->vocab_size();
    model::Transformer m(cfg);
    FitRequest req;
    req.run_dir = run.string();
    req.model = cfg;
    LM_ASSERT_OK(write_json_file((run / "config.json").string(), run_config_json(req)));
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value());
    AdamW opt(params, req.train);
    Json state = {{"step", 1}, {"tokens", 1}, {"data_cursor", Json::object()}, {"config", run_config_json(req)},
                  {"tokenizer_hash", ""}, {"world_size", 1}};
    LM_ASSERT_OK(save_checkpoint(run.string(), 1, m, opt, state, 3));
    LM_ASSERT_OK(export_hf({run.string(), -1, (dir / "hf_tok").string(), "fp32", /*force=*/true}).status());
    Json rows = Json::array();
    for (const char* text : {"বাংলা ভাষা আমার মাতৃভাষা।", "আমি ২০২৪ সালে ঢাকায় গিয়েছিলাম, সেখানে বৃষ্টি হচ্ছিল!",
                             "The quick brown fox jumps over 13 lazy dogs.", "ইংরেজিতে বলে \"language model\" (ভাষা মডেল)।"}) {
      std::vector<int32_t> ids = {tok->start_id()};  // bos: the trained framing, add_bos_token true
      for (int32_t t : tok->encode(text)) ids.push_back(t);
      rows.push_back({{"text", text}, {"ids", ids}});
    }
    LM_ASSERT_OK(write_json_file((dir / "hf_tok_expected.json").string(), rows));
  }
}

// --- report ---------------------------------------------------------------------------------

// The report's run: 20 steps, a log line every 2, validation (and text samples) every 4.
FitRequest report_run(const fs::path& dir, ValSets* val) {
  FitRequest r;
  r.run_dir = (dir / "run").string();
  r.model = tiny();
  r.train.steps = 20;
  r.train.batch.micro_batch = 2;
  r.train.batch.seq_len = 16;
  r.train.schedule.warmup_steps = 2;
  r.train.logging.interval = 2;
  r.train.eval.interval = 4;  // validation runs on logged steps: 4, 8, ..., 20
  r.train.checkpoint.interval = 10;
  r.train.hardware.threads = 2;
  r.train.debug.verify_at_start = false;
  r.train.eval.sample_tokens = 4;
  r.tokenizer_hash = "tok-test";
  // Token ids as words ("w17"), enough for samples to have text.
  r.codec.encode = [](std::string_view) { return std::vector<int32_t>{5, 6}; };
  r.codec.decode = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += (s.empty() ? "w" : " w") + std::to_string(id);
    return s;
  };
  testing::SyntheticSource val_src(2, 17, 512);
  std::vector<int32_t> flat;
  for (const char* lang : {"bn", "en"}) {
    val_src.next(&flat);
    (*val)[lang] = {std::vector<int32_t>(flat.begin(), flat.begin() + 17), std::vector<int32_t>(flat.begin() + 17, flat.end())};
  }
  return r;
}

// The points of the SVG polyline named `name` in the report (-1 when there is none).
int points_of(const std::string& html, const std::string& name) {
  const auto at = html.find("data-name=\"" + name + "\"");
  if (at == std::string::npos) return -1;
  const auto p = html.find("points=\"", at), e = html.find('"', p + 8);
  const std::string pts = html.substr(p + 8, e - p - 8);
  return static_cast<int>(std::count(pts.begin(), pts.end(), ','));
}

// The cells of the first <table class="CLS"> row `row` (0 = the header), tags stripped.
std::vector<std::string> table_row(const std::string& html, const std::string& cls, int row) {
  size_t at = html.find("<table class=\"" + cls + "\">");
  if (at == std::string::npos) return {};
  for (int i = 0; i <= row; ++i) at = html.find("<tr>", at + 1);
  const size_t end = html.find("</tr>", at);
  std::vector<std::string> cells;
  for (size_t c = html.find("<t", at + 4); c < end; c = html.find("<t", c + 1)) {
    const size_t open = html.find('>', c) + 1, close = html.find("</t", open);
    std::string text, raw = html.substr(open, close - open);
    for (size_t k = 0, tag = 0; k < raw.size(); ++k) {  // drop inner tags (<span class="se">)
      if (raw[k] == '<') tag = 1;
      if (!tag) text += raw[k];
      if (raw[k] == '>') tag = 0;
    }
    cells.push_back(text);
    c = close;
  }
  return cells;
}

TEST_F(ExportTest, ReportHasCurvesTablesSamplesAndPngs) {
  const auto dir = temp_dir("report");
  ValSets val;
  FitRequest r = report_run(dir, &val);
  testing::SyntheticSource src(2, 17, 512);
  LM_ASSERT_OK(fit(r, src, val).status());
  const fs::path run(r.run_dir);
  write_tokenizer(run);
  Json fert = {{"vocab_size", 512}, {"rows", {{{"encoder", "spm"}, {"set", "heldout"}, {"lang", "bn"}, {"cp_per_token", 3.25}, {"tokens_per_word", 1.61}}}}};
  LM_ASSERT_OK(write_json_file((run / "tokenizer/fertility.json").string(), fert));
  fs::create_directories(run / "eval");
  // As `lmeval nll --twin` and `lmeval mc --twin` write them (eval/evaluate.cpp), abridged.
  Json nll = {{"step", 20}, {"seq_len", 16}, {"stride", 0}, {"docs", "stream"}, {"evaluation", {{"file", "nll-3f2a.json"}, {"chosen", "largest"}}},
              {"languages", {{"bn", {{"model", {{"tokens", 1234}, {"nats_per_token", 4.1}, {"perplexity", 60.34}, {"bits_per_byte", 1.9}, {"bits_per_char", 2.5}}},
                                     {"twin", {{"tokens", 1234}, {"nats_per_token", 6.24}, {"bits_per_byte", 2.9}}},
                                     {"twin_minus_model", {{"nats_per_token", 2.14}}}, {"windows", 7}}}}}};
  Json mc = {{"step", 20}, {"prefix", "bos"}, {"limit", 20}, {"missing", {"xcopa_bn"}},
             {"tasks", {{"copa", {{"n", 100}, {"chance", 0.5}, {"acc", 0.61}, {"acc_stderr", 0.049}, {"acc_norm", 0.58}, {"acc_norm_stderr", 0.05},
                                  {"split", "validation"}, {"twin", {{"acc", 0.49}}}, {"paired_acc", {{"p_value", 0.0123}}}, {"paired_acc_norm", {{"p_value", 0.31}}}}},
                        {"sib200_bn", {{"n", 40}, {"chance", 0.1429}, {"acc", 0.2}, {"acc_stderr", 0.06}, {"split", "test"},
                                       {"skipped_too_long", 3}}},
                        // A Bangla task (lmeval mc marks its group): in the second table (issue 41).
                        {"piqa_bn", {{"n", 8}, {"chance", 0.5}, {"acc", 0.375}, {"split", "validation, 0-shot"},
                                     {"group", "bangla"}}},
                        // Worse than the twin at p 0.004 (a loss after Holm's correction: 4 × 0.004), and
                        // a raw p of 0.03 that the correction leaves unmarked (2 × 0.03).
                        {"winogrande", {{"n", 300}, {"chance", 0.5}, {"acc", 0.45}, {"acc_norm", 0.6}, {"split", "validation"},
                                        {"twin", {{"acc", 0.55}, {"acc_norm", 0.5}}}, {"paired_acc", {{"p_value", 0.004}}},
                                        {"paired_acc_norm", {{"p_value", 0.03}, {"acc_diff", 0.1}}}}}}}};
  LM_ASSERT_OK(write_json_file((run / "eval/nll.json").string(), nll));
  LM_ASSERT_OK(write_json_file((run / "eval/mc.json").string(), mc));
  auto rep = report::write_report(r.run_dir);
  LM_ASSERT_OK(rep.status());
  const std::string html = *read_file(rep->html);
  // Curves: one point per logged step (10); validation per language at the 5 evaluations, a
  // connected line (solid: no dash array) in the loss plot and in its own.
  EXPECT_EQ(points_of(html, "train"), 10);
  EXPECT_EQ(points_of(html, "val bn"), 5);
  EXPECT_EQ(points_of(html, "val en"), 5);
  for (const char* name : {"lr", "grad norm", "tokens/s", "mfu"}) EXPECT_EQ(points_of(html, name), 10) << name;
  const size_t val_line = html.find("data-name=\"val bn\"");
  EXPECT_EQ(html.substr(val_line, html.find("/>", val_line) - val_line).find("dasharray"), std::string::npos);
  for (const char* id : {"plot-loss", "plot-val_loss", "plot-grad_norm", "plot-lr", "plot-throughput", "plot-mfu"})
    EXPECT_NE(html.find(absl::StrFormat("id=\"%s\"", id)), std::string::npos) << id;
  // Tables: fixed columns, formatted values.
  EXPECT_EQ(table_row(html, "nll", 0), report::nll_columns());
  EXPECT_EQ(table_row(html, "nll", 1), (std::vector<std::string>{"bn", "1234", "7", "4.1000", "6.2400", "2.1400", "1.9000",
                                                                  "2.9000", "60.34", "2.5000"}));
  EXPECT_EQ(table_row(html, "mc", 0), report::mc_columns());
  EXPECT_EQ(table_row(html, "mc", 1), (std::vector<std::string>{"copa", "100", "0.5000", "0.6100 ± 0.0490", "0.5800 ± 0.0500",
                                                                 "0.4900", "0.1200", "0.0123", "0.31", "validation"}));
  EXPECT_EQ(table_row(html, "mc", 2), (std::vector<std::string>{"sib200_bn", "40", "0.1429", "0.2000 ± 0.0600", "–", "–", "–",
                                                                 "–", "–", "test"}));
  for (const char* needle : {"id=\"fertility\"", "3.25", "docs <b>stream</b>", "eval/nll-3f2a.json", "prefix <b>bos</b>",
                             "no data for xcopa_bn", "<td class=\"win\">0.0123</td>",
                             "<td class=\"loss\">0.004</td>", "<td>0.03</td>", "Holm's correction for the table's 4 tests", "id=\"config\"", "Noto Sans Bengali",
                             "&quot;seq_len&quot;: 16",  // the resolved config, HTML-escaped
                             "not scored, longer than the model's context: sib200_bn 3 (n counts the scored)"})
    EXPECT_NE(html.find(needle), std::string::npos) << needle;
  const size_t bangla = html.find("Bangla tasks (lm-evaluation-harness 0.4.13 YAMLs)");
  ASSERT_NE(bangla, std::string::npos);
  EXPECT_GT(html.find("<td>piqa_bn</td>"), bangla);  // only in the Bangla table, after the English one
  EXPECT_LT(html.find("<table class=\"mc\">"), bangla);  // the English table first
  // Samples: one row per validation step, one column per language, the prompt then the text.
  EXPECT_EQ(table_row(html, "samples", 0), (std::vector<std::string>{"step", "bn", "en"}));
  auto samples = read_metrics(RunFolder(r.run_dir).samples());
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 5u);
  const Json& last = samples->back()["samples"][1];
  EXPECT_EQ(table_row(html, "samples", 5),
            (std::vector<std::string>{"20", table_row(html, "samples", 5)[1],
                                      last["prompt"].get<std::string>() + last["completion"].get<std::string>()}));
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no external fetches
  EXPECT_EQ(html.find("<script"), std::string::npos);
  ASSERT_EQ(rep->pngs.size(), 6u);
  for (const auto& p : rep->pngs) {
    const std::string png = *read_file(p);
    ASSERT_GT(png.size(), 1000u) << p;
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << p;
    EXPECT_EQ(png.substr(16, 8), std::string("\0\0\x05\0\0\0\x02\x80", 8)) << p << ": 1280x640, twice the page's plot";
  }
}

// The RGB pixels of a PNG from encode_png (one IDAT, filter 0 on every row).
std::vector<uint8_t> png_pixels(const std::string& png, int* w, int* h) {
  auto be32 = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<uint8_t>(png[at])) << 24 | static_cast<uint8_t>(png[at + 1]) << 16 |
           static_cast<uint8_t>(png[at + 2]) << 8 | static_cast<uint8_t>(png[at + 3]);
  };
  *w = static_cast<int>(be32(16)), *h = static_cast<int>(be32(20));
  const size_t idat = png.find("IDAT");
  std::vector<uint8_t> raw(static_cast<size_t>(*h) * (3 * *w + 1));
  uLongf n = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &n, reinterpret_cast<const Bytef*>(png.data() + idat + 4), be32(idat - 4)), Z_OK);
  std::vector<uint8_t> rgb;
  for (int y = 0; y < *h; ++y) rgb.insert(rgb.end(), raw.begin() + y * (3 * *w + 1) + 1, raw.begin() + (y + 1) * (3 * *w + 1));
  return rgb;
}

// Every marker of a series is the same dot: the runs of columns where the series colour is taller
// than its line (the markers; the legend's marker also crosses the line) have one height for the
// 5 points, not 5 heights (a marker that grew along the series).
TEST_F(ExportTest, PngMarkersAreTheSameSizeAlongASeries) {
  report::Series s{"s", {0, 1, 2, 3, 4}, {1, 1, 1, 1, 1}, "#ff0000"};
  s.markers = true;
  int w = 0, h = 0;
  const std::vector<uint8_t> rgb = png_pixels(report::plot_png(report::Plot{"t", "x", "y", {s}}, 1280, 640), &w, &h);
  ASSERT_EQ(w, 1280);
  std::vector<int> red(w, 0);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint8_t* p = &rgb[3 * (y * w + x)];
      red[x] += p[0] == 255 && p[1] == 0 && p[2] == 0;
    }
  int line = h;  // the line's thickness: the shortest red column
  for (int c : red)
    if (c > 0) line = std::min(line, c);
  std::map<int, int> runs_of_height;  // marker height -> markers
  std::string seen;
  for (int x = 0, top = 0; x <= w; ++x) {
    if (x < w && red[x] > line) {
      top = std::max(top, red[x]);
    } else if (top > 0) {
      ++runs_of_height[top];
      seen += std::to_string(top) + " ";
      top = 0;
    }
  }
  int most = 0;
  for (auto& [height, n] : runs_of_height) most = std::max(most, n);
  EXPECT_EQ(most, 5) << "marker heights (px): " << seen;
}

// Whether a TrueType font maps `cp` to a glyph: its cmap's Windows Unicode BMP subtable (format 4,
// OpenType spec, "cmap — Character to Glyph Index Mapping Table").
bool ttf_has_glyph(std::string_view ttf, uint32_t cp) {
  auto u16 = [&](size_t o) { return static_cast<uint32_t>(static_cast<uint8_t>(ttf[o]) << 8 | static_cast<uint8_t>(ttf[o + 1])); };
  auto u32 = [&](size_t o) { return u16(o) << 16 | u16(o + 2); };
  size_t cmap = 0;
  for (uint32_t i = 0, n = u16(4); i < n; ++i)
    if (ttf.substr(12 + 16 * i, 4) == "cmap") cmap = u32(12 + 16 * i + 8);
  if (cmap == 0) return false;
  for (uint32_t i = 0, n = u16(cmap + 2); i < n; ++i) {
    const size_t rec = cmap + 4 + 8 * i, sub = cmap + u32(rec + 4);
    if (u16(rec) != 3 || u16(rec + 2) != 1 || u16(sub) != 4) continue;
    const uint32_t segs = u16(sub + 6) / 2;
    const size_t ends = sub + 14, starts = ends + 2 * segs + 2, deltas = starts + 2 * segs, ranges = deltas + 2 * segs;
    for (uint32_t k = 0; k < segs; ++k) {
      if (u16(ends + 2 * k) < cp) continue;
      if (u16(starts + 2 * k) > cp) return false;
      const uint32_t ro = u16(ranges + 2 * k);
      if (ro == 0) return ((cp + u16(deltas + 2 * k)) & 0xFFFF) != 0;
      const uint32_t g = u16(ranges + 2 * k + ro + 2 * (cp - u16(starts + 2 * k)));
      return g != 0 && ((g + u16(deltas + 2 * k)) & 0xFFFF) != 0;
    }
  }
  return false;
}

// Every Bengali sentence ends with a danda (U+0964, from the Devanagari block): the embedded font
// has its glyphs, and its unicode-range must name them, or a machine without a Bengali font shows
// a box at each sentence end (issue 41).
TEST_F(ExportTest, EmbeddedBengaliFontCoversTheDanda) {
  const std::string_view ttf = report::bengali_font_ttf();
  for (uint32_t cp : {0x0964u, 0x0965u, 0x0995u}) EXPECT_TRUE(ttf_has_glyph(ttf, cp)) << std::hex << cp;
  EXPECT_FALSE(ttf_has_glyph(ttf, 0x4E00)) << "a CJK ideograph: the cmap reader can say no";
  const std::string face = report::bengali_font_face();
  EXPECT_NE(face.find("unicode-range:U+0964-0965,U+0980-09FF,"), std::string::npos) << face.substr(face.size() - 120);
}

// A report that shows Bengali text (here the samples) embeds a Bengali font: a machine without
// one drew empty boxes (issue 30 item 16). One without Bengali does not carry the font's ~175 KB.
TEST_F(ExportTest, ReportEmbedsABengaliFontOnlyWhenItShowsBengali) {
  EXPECT_TRUE(report::has_bengali("loss \xe0\xa6\xac\xe0\xa6\xbe"));  // "বা"
  EXPECT_FALSE(report::has_bengali("caf\xc3\xa9 \xe0\xa4\xb9"));       // é, Devanagari ह
  const std::string_view ttf = report::bengali_font_ttf();
  ASSERT_GT(ttf.size(), 100000u);
  EXPECT_LT(ttf.size(), 300000u);
  EXPECT_EQ(ttf.substr(0, 4), std::string_view("\0\1\0\0", 4)) << "a TrueType file";
  for (const bool bengali : {false, true}) {
    const auto dir = temp_dir(bengali ? "report_font_bn" : "report_font_latin");
    ValSets val;
    FitRequest r = report_run(dir, &val);
    r.train.steps = 4;
    if (bengali)
      r.codec.decode = [](const std::vector<int32_t>& ids) {
        std::string s;
        for (size_t i = 0; i < ids.size(); ++i) s += "\xe0\xa6\xac\xe0\xa6\xbe ";  // "বা "
        return s;
      };
    testing::SyntheticSource src(2, 17, 512);
    LM_ASSERT_OK(fit(r, src, val).status());
    auto rep = report::write_report(r.run_dir);
    LM_ASSERT_OK(rep.status());
    const std::string html = *read_file(rep->html);
    ASSERT_EQ(report::has_bengali(html), bengali) << "the samples decide";
    const size_t face = html.find("@font-face{font-family:'lmforge Lohit Bengali'");
    if (!bengali) {
      EXPECT_EQ(face, std::string::npos);
      EXPECT_LT(html.size(), 100000u);
      continue;
    }
    ASSERT_NE(face, std::string::npos);
    EXPECT_LT(face, html.find("</style>"));
    EXPECT_NE(html.find(absl::Base64Escape(absl::string_view(ttf.data(), ttf.size())), face), std::string::npos) << "the whole font, inline";
    EXPECT_NE(html.find("SIL Open Font License 1.1"), std::string::npos) << "the OFL travels with each copy";
    EXPECT_NE(html.find("'Lohit Bengali','lmforge Lohit Bengali','Noto Sans'"), std::string::npos)
        << "installed Bengali fonts first, the embedded one after them";
  }
}

// A resume that extends the budget rewrites config.json: the report shows the run as it now is,
// and both starts.
TEST_F(ExportTest, ReportShowsTheConfigAsResumed) {
  const auto dir = temp_dir("report_resume");
  ValSets val;
  FitRequest r = report_run(dir, &val);
  r.train.eval.sample_tokens = 0;
  {
    testing::SyntheticSource src(2, 17, 512);
    LM_ASSERT_OK(fit(r, src, val).status());
  }
  r.resume = true;
  r.train.steps = 30;  // what `lmtrain fit --resume --steps 30` asks after re-planning
  {
    testing::SyntheticSource src(2, 17, 512);
    LM_ASSERT_OK(fit(r, src, val).status());
  }
  auto rep = report::write_report(r.run_dir);
  LM_ASSERT_OK(rep.status());
  const std::string html = *read_file(rep->html);
  const size_t config = html.find("id=\"config\"");
  ASSERT_NE(config, std::string::npos);
  EXPECT_NE(html.find("&quot;steps&quot;: 30", config), std::string::npos);
  EXPECT_EQ(html.find("&quot;steps&quot;: 20", config), std::string::npos);
  EXPECT_NE(html.find("2 starts (1 resume)", config), std::string::npos);
  EXPECT_NE(html.find("<td>30 of 30</td>"), std::string::npos) << "summary: steps done of planned";
}

}  // namespace
}  // namespace lm::train
