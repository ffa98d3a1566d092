// GGUF writer (model/gguf.h) and export (model/gguf_export.h): header and alignment read back by
// an independent parser written from the spec, Q8_0 against ggml's reference quantizer, the q/k
// row permutation against llama.cpp's interleaved rotary, tensor names, the spm.model reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/config.h"
#include "core/file.h"
#include "model/gguf.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "model/gguf_export.h"
#include "train/optim.h"
#include "train/trainer.h"
#include "corpus/corpus.h"
#include "tokenizer/train.h"

#define LM_ASSERT_OK(expr)                         \
  do {                                             \
    const auto& lm_st_ = (expr);                   \
    ASSERT_TRUE(lm_st_.ok()) << lm_st_.ToString(); \
  } while (0)

namespace lm {
namespace {
namespace fs = std::filesystem;
using model::GgmlType;

// --- a minimal GGUF reader written from ggml's docs/gguf.md, independent of the writer ------------

// `bad` stops the reading at the first malformed value (not at the test's first failure of any
// kind: a failed EXPECT before a parse must not desynchronise it).
struct Reader {
  const std::string& b;
  size_t p = 0;
  bool bad = false;
  template <class T>
  T get() {
    T v{};
    EXPECT_LE(p + sizeof(T), b.size());
    if (bad || p + sizeof(T) > b.size()) {
      bad = true;
      return v;
    }
    std::memcpy(&v, b.data() + p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    std::string s = b.substr(p, n);
    p += n;
    return s;
  }
};

struct Parsed {
  uint32_t version = 0;
  std::map<std::string, std::pair<uint32_t, std::string>> kv;  // key -> (type, scalar rendered / array count)
  struct Info { std::vector<uint64_t> ne; uint32_t type; uint64_t offset; };
  std::vector<std::pair<std::string, Info>> tensors;
  size_t data_start = 0;
};

std::string read_value(Reader& r, uint32_t type) {
  switch (type) {
    case 0: return std::to_string(r.get<uint8_t>());
    case 4: return std::to_string(r.get<uint32_t>());
    case 5: return std::to_string(r.get<int32_t>());
    case 6: return std::to_string(r.get<float>());
    case 7: return std::to_string(r.get<uint8_t>());
    case 8: return r.str();
    case 9: {
      const auto et = r.get<uint32_t>();
      const auto n = r.get<uint64_t>();
      if (et == 0) {
        r.p += n;  // uint8 array (the charsmap): skip without one failure per byte
      } else {
        for (uint64_t i = 0; i < n && !r.bad; ++i) read_value(r, et);
      }
      return "array[" + std::to_string(n) + "]";
    }
  }
  r.bad = true;
  ADD_FAILURE() << "value type " << type << " not expected here";
  return "";
}

Parsed parse(const std::string& b) {
  Parsed g;
  Reader r{b};
  EXPECT_EQ(b.substr(0, 4), "GGUF");
  r.p = 4;
  g.version = r.get<uint32_t>();
  const auto n_tensors = r.get<uint64_t>();
  const auto n_kv = r.get<uint64_t>();
  for (uint64_t i = 0; i < n_kv && !r.bad; ++i) {
    std::string key = r.str();
    const auto type = r.get<uint32_t>();
    g.kv[key] = {type, read_value(r, type)};
  }
  for (uint64_t i = 0; i < n_tensors && !r.bad; ++i) {
    std::string name = r.str();
    Parsed::Info info;
    const auto nd = r.get<uint32_t>();
    for (uint32_t d = 0; d < nd && !r.bad; ++d) info.ne.push_back(r.get<uint64_t>());
    info.type = r.get<uint32_t>();
    info.offset = r.get<uint64_t>();
    g.tensors.emplace_back(name, info);
  }
  g.data_start = (r.p + 31) / 32 * 32;
  return g;
}

TEST(GgufWriter, HeaderKeysTensorInfosAndAlignment) {
  model::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_f32("llama.rope.freq_base", 10000.0f);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  torch::manual_seed(0);
  auto a = torch::randn({3, 64});  // [out, in] -> ne {64, 3}
  auto b = torch::randn({5});      // 20 bytes: the next tensor must be padded to 32
  auto c = torch::randn({2, 32});
  LM_ASSERT_OK(w.add_tensor("a.weight", a, GgmlType::kF16));
  LM_ASSERT_OK(w.add_tensor("b.weight", b, GgmlType::kF32));
  LM_ASSERT_OK(w.add_tensor("c.weight", c, GgmlType::kQ8_0));
  const std::string bytes = w.encode();
  Parsed g = parse(bytes);
  EXPECT_EQ(g.version, 3u);
  ASSERT_EQ(g.kv.size(), 5u);
  EXPECT_EQ(g.kv["general.architecture"], std::make_pair(8u, std::string("llama")));
  EXPECT_EQ(g.kv["llama.block_count"], std::make_pair(4u, std::string("2")));
  EXPECT_EQ(g.kv["tokenizer.ggml.add_bos_token"], std::make_pair(7u, std::string("0")));
  EXPECT_EQ(g.kv["tokenizer.ggml.tokens"], std::make_pair(9u, std::string("array[3]")));
  ASSERT_EQ(g.tensors.size(), 3u);
  EXPECT_EQ(g.tensors[0].second.ne, (std::vector<uint64_t>{64, 3}));
  EXPECT_EQ(g.tensors[0].second.type, 1u);
  EXPECT_EQ(g.tensors[1].second.type, 0u);
  EXPECT_EQ(g.tensors[2].second.type, 8u);
  // Offsets: 3*64*2 = 384 bytes, then 20 bytes padded to 32, then 2 blocks of 34.
  EXPECT_EQ(g.tensors[0].second.offset, 0u);
  EXPECT_EQ(g.tensors[1].second.offset, 384u);
  EXPECT_EQ(g.tensors[2].second.offset, 416u);
  EXPECT_EQ(g.data_start % 32, 0u);
  EXPECT_EQ(bytes.size(), g.data_start + 416 + 96);  // 68 bytes padded to 96
  // Data: f16 values are torch's round-to-nearest-even halves; f32 verbatim.
  auto h = a.to(torch::kFloat16).contiguous();
  EXPECT_EQ(std::memcmp(bytes.data() + g.data_start, h.data_ptr(), 384), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + g.data_start + 384, b.data_ptr(), 20), 0);
  for (size_t i = g.data_start + 404; i < g.data_start + 416; ++i) EXPECT_EQ(bytes[i], '\0') << "padding at " << i;
}

TEST(GgufWriter, RejectsBadTensors) {
  model::GgufWriter w;
  auto st = w.add_tensor("x.weight", torch::zeros({4, 48}), GgmlType::kQ8_0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("48"), std::string::npos) << st;
  st = w.add_tensor(std::string(64, 'n'), torch::zeros({4}), GgmlType::kF32);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  w.add_u32("k", 1);
  EXPECT_THROW(w.add_u32("k", 2), c10::Error);  // a duplicate key is a programming error
}

// ggml-quants.c quantize_row_q8_0_ref, transcribed: d = amax/127, id = 1/d, q = roundf(x*id).
std::string reference_q8_0(const std::vector<float>& x) {
  std::string out;
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = c10::Half(d).x;
    out.append(reinterpret_cast<const char*>(&dh), 2);
    for (int j = 0; j < 32; ++j) out.push_back(static_cast<char>(static_cast<int8_t>(roundf(x[b + j] * id))));
  }
  return out;
}

TEST(GgufWriter, Q8_0MatchesGgmlReferenceBitForBit) {
  torch::manual_seed(1);
  std::vector<float> x(32 * 64);
  auto r = torch::randn({static_cast<int64_t>(x.size())}) * 3;
  std::memcpy(x.data(), r.data_ptr<float>(), x.size() * 4);
  std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block: d = 0, q = 0
  // Exact ties: max 127 gives d = 1, so x * id is x itself; roundf takes 2.5 -> 3 and -0.5 -> -1
  // (half away from zero, as ggml), where rint's half-to-even would give 2 and 0.
  x[32] = 127.0f;
  for (int j = 1; j < 32; ++j) x[32 + j] = (j - 16) + 0.5f;
  const std::string q = model::quantize_q8_0(x.data(), static_cast<int64_t>(x.size()));
  ASSERT_EQ(q.size(), x.size() / 32 * 34);
  const std::string want = reference_q8_0(x);
  const size_t at = std::mismatch(q.begin(), q.end(), want.begin()).first - q.begin();
  EXPECT_EQ(at, q.size()) << "first difference in block " << at / 34 << ", byte " << at % 34 << ": "
                          << int(int8_t(q[at])) << " vs ggml's " << int(int8_t(want[at]));
  // Round trip: each value within half a step (d/2, plus d's own fp16 rounding of 2^-11 relative).
  const auto back = model::dequantize_q8_0(q);
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(back[b + j] - x[b + j]), amax / 127 * 0.5f + amax * 1e-3f) << b + j;
  }
  // Negative control: the reference catches a one-step change in a single quant.
  std::string broken = q;
  broken[34 * 5 + 2 + 7] += 1;
  EXPECT_NE(broken, reference_q8_0(x));
}

// --- export pieces ---------------------------------------------------------------------------

TEST(GgufExport, TensorNamesFollowLlamaCpp) {
  EXPECT_EQ(model::gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(model::gguf_tensor_name("model.layers.11.self_attn.q_proj.weight"), "blk.11.attn_q.weight");
  EXPECT_EQ(model::gguf_tensor_name("model.layers.0.self_attn.o_proj.weight"), "blk.0.attn_output.weight");
  EXPECT_EQ(model::gguf_tensor_name("model.layers.0.post_attention_layernorm.weight"), "blk.0.ffn_norm.weight");
  EXPECT_EQ(model::gguf_tensor_name("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(model::gguf_tensor_name("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(model::gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(model::gguf_tensor_name("model.layers.0.mlp.fancy.weight"), "");
  // Every parameter of a model has a name.
  auto c = *model::preset("tiny");
  c.tie_embeddings = false;
  model::Transformer m(c);
  for (auto& [name, t] : model::module_state(*m)) EXPECT_NE(model::gguf_tensor_name(name), "") << name;
}

// llama.cpp's ROPE_TYPE_NORM (ggml rope, mode 0): pairs (2i, 2i+1) rotated by pos * theta^(-2i/D).
torch::Tensor interleaved_rope(const torch::Tensor& x, int64_t pos, double theta) {  // x: [H, D]
  auto y = x.clone();
  const int64_t D = x.size(1);
  for (int64_t i = 0; i < D / 2; ++i) {
    const double a = pos * std::pow(theta, -2.0 * i / D);
    auto x0 = x.select(1, 2 * i), x1 = x.select(1, 2 * i + 1);
    y.select(1, 2 * i).copy_(x0 * std::cos(a) - x1 * std::sin(a));
    y.select(1, 2 * i + 1).copy_(x0 * std::sin(a) + x1 * std::cos(a));
  }
  return y;
}

TEST(GgufExport, PermutedRowsGiveLlamaCppTheSameRotaryScores) {
  // q·k after rotary must not depend on the convention once the rows are permuted: lmforge's
  // rotate_half on W x equals llama.cpp's interleaved rotation on permute(W) x, up to the same
  // row permutation in q and k, which a dot product over D does not see.
  torch::manual_seed(2);
  const int64_t H = 4, Hkv = 2, D = 16, C = 64, pq = 7, pk = 2;  // q and k at different positions:
  // at equal positions both rotate alike and q·k would not see the rotary at all.
  auto wq = torch::randn({H * D, C}), wk = torch::randn({Hkv * D, C}), x = torch::randn({C}), y = torch::randn({C});
  auto [cos, sin] = model::rotary_tables(pq + 1, D, 10000.0, 0, torch::kCPU);
  auto ours = [&, cos = cos, sin = sin](const torch::Tensor& w, const torch::Tensor& in, int64_t h, int64_t pos) {
    auto v = torch::matmul(w, in).view({1, h, 1, D});  // [B, H, T, D]
    return model::apply_rotary(v, cos.narrow(0, pos, 1), sin.narrow(0, pos, 1)).view({h, D});
  };
  auto theirs = [&](const torch::Tensor& w, const torch::Tensor& in, int64_t h, int64_t pos, bool permute) {
    auto wp = permute ? model::permute_rope_rows(w, h) : w;
    return interleaved_rope(torch::matmul(wp, in).view({h, D}), pos, 10000.0);
  };
  // Scores of query head h against kv head h / (H / Hkv), as GQA pairs them.
  auto scores = [&](const torch::Tensor& q, const torch::Tensor& k) { return (q * k.repeat_interleave(H / Hkv, 0)).sum(1); };
  auto s0 = scores(ours(wq, x, H, pq), ours(wk, y, Hkv, pk));
  auto s1 = scores(theirs(wq, x, H, pq, true), theirs(wk, y, Hkv, pk, true));
  // fp32, scores ~1e2: the two paths differ by rounding only; 1e-3 relative.
  EXPECT_TRUE(torch::allclose(s0, s1, 1e-3, 1e-3)) << s0 << s1;
  // Negative control: without the permutation the scores differ.
  auto s2 = scores(theirs(wq, x, H, pq, false), theirs(wk, y, Hkv, pk, false));
  EXPECT_FALSE(torch::allclose(s0, s2, 1e-2, 1e-2)) << s0 << s2;
}

// A real SentencePiece model: $LM_GGUF_TOKENIZER (gguf_check.sh's), else one trained here once on
// data/sample (vocab 512, as the tiny preset).
std::string tokenizer_dir() {
  static std::string dir = [] {
    if (const char* env = std::getenv("LM_GGUF_TOKENIZER")) return std::string(env);
    const fs::path d = fs::temp_directory_path() / ("lm_gguf_test_" + std::to_string(getpid())) / "tok";
    fs::remove_all(d);
    auto manifest = data::load_manifest(LM_SOURCE_DIR "/data/sample/corpus.json");
    if (!manifest.ok()) return std::string();
    tokenizer::TrainOptions to;
    to.vocab_size = 512;
    to.sample_chars = 150000;
    to.threads = 2;
    auto sample = tokenizer::build_sample(*manifest, to);
    if (!sample.ok()) return std::string();
    tokenizer::SampleSummary summary = sample->summary;
    auto tok = tokenizer::train_tokenizer(*sample, to, d.string(), &summary);
    return tok.ok() ? d.string() : std::string();
  }();
  return dir;
}

// Removes this process's temp folder (the trained tokenizer, run folders) at exit.
class TempCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("lm_gguf_test_" + std::to_string(getpid())), ec);
  }
};
const auto* const kTempCleanup = ::testing::AddGlobalTestEnvironment(new TempCleanup);

TEST(GgufExport, ReadsSpmVocabAndRejectsOtherFiles) {
  const std::string dir = tokenizer_dir();
  ASSERT_FALSE(dir.empty()) << "could not train a tokenizer on data/sample";
  auto bytes = read_file(std::string(dir) + "/spm.model");
  LM_ASSERT_OK(bytes.status());
  auto v = model::read_spm_vocab(*bytes, "spm.model");
  LM_ASSERT_OK(v.status());
  auto tok = tokenizer::Tokenizer::load(dir);
  LM_ASSERT_OK(tok.status());
  ASSERT_EQ(static_cast<int64_t>(v->pieces.size()), tok->vocab_size());
  EXPECT_TRUE(v->add_dummy_prefix);
  EXPECT_FALSE(v->remove_extra_whitespaces);       // lmforge's recipe (tokenizer/train.cpp)
  EXPECT_GT(v->precompiled_charsmap.size(), 1000u);  // the compiled NFC + Bengali rules
  for (int32_t i = 0; i < tok->vocab_size(); ++i) EXPECT_EQ(v->pieces[i], tok->piece(i)) << i;
  EXPECT_EQ(v->types[tok->bos_id()], 3);   // CONTROL
  EXPECT_EQ(v->types[tok->unk_id()], 2);   // UNKNOWN
  EXPECT_EQ(v->model_type, 1);             // UNIGRAM
  auto truncated = model::read_spm_vocab(bytes->substr(0, bytes->size() / 2), "half.model");
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("half.model"), std::string::npos);
  EXPECT_FALSE(model::read_spm_vocab("placeholder spm bytes", "p.model").ok());
}

// export_gguf on a run folder (tiny model, real tokenizer), read back by the spec parser above:
// every key the issue names, 20 tensors for a tied model (no output.weight), q8_0 matrices with
// f32 norms, the permuted q rows, and errors that name the file. Needs no Python.
TEST(GgufExport, ExportsARunFolder) {
  const std::string tok_dir = tokenizer_dir();
  ASSERT_FALSE(tok_dir.empty());
  const fs::path run = fs::temp_directory_path() / ("lm_gguf_test_" + std::to_string(getpid())) / "run";
  fs::remove_all(run);
  fs::create_directories(run / "tokenizer");
  for (const char* f : {"spm.model", "tokenizer.json"}) fs::copy_file(fs::path(tok_dir) / f, run / "tokenizer" / f);
  auto cfg = *model::preset("tiny");
  model::Transformer m(cfg);
  m->init_weights(3);
  train::FitRequest req;
  req.run_dir = run.string();
  req.model = cfg;
  LM_ASSERT_OK(write_json_file((run / "config.json").string(), train::run_config_json(req)));
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value());
  train::AdamW opt(params, req.train);
  Json state = {{"step", 3}, {"tokens", 3}, {"data_cursor", Json::object()}, {"config", train::run_config_json(req)},
                {"tokenizer_hash", ""}, {"world_size", 1}};
  LM_ASSERT_OK(train::save_checkpoint(run.string(), 3, m, opt, state, 1));

  const std::string out = (run / "m.gguf").string();
  auto r = model::export_gguf({run.string(), -1, out, "q8_0"});
  LM_ASSERT_OK(r.status());
  EXPECT_EQ(r->step, 3);
  auto bytes = read_file(out);
  LM_ASSERT_OK(bytes.status());
  Parsed g = parse(*bytes);
  for (const char* k : {"general.architecture", "llama.context_length", "llama.embedding_length", "llama.block_count",
                        "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
                        "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
                        "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"})
    EXPECT_TRUE(g.kv.count(k)) << k;
  EXPECT_EQ(g.kv["llama.block_count"].second, "2");
  EXPECT_EQ(g.kv["llama.attention.head_count_kv"].second, "2");
  EXPECT_EQ(g.kv["tokenizer.ggml.model"].second, "t5");
  // The trained tokenizer's framing bos + text + eos: llama.cpp starts a prompt with BOS, as a
  // document starts in training (issue 21 point 7).
  EXPECT_EQ(g.kv["tokenizer.ggml.add_bos_token"].second, "1");
  EXPECT_EQ(g.kv["tokenizer.ggml.add_eos_token"].second, "0");
  EXPECT_EQ(g.kv["tokenizer.ggml.tokens"].second, "array[512]");
  EXPECT_EQ(g.kv["general.file_type"].second, "7");
  ASSERT_EQ(g.tensors.size(), 20u);  // 1 + 2 layers x 9 + output_norm; tied: no output.weight
  std::map<std::string, Parsed::Info> by_name(g.tensors.begin(), g.tensors.end());
  EXPECT_EQ(by_name["token_embd.weight"].ne, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(by_name["token_embd.weight"].type, 8u);
  EXPECT_EQ(by_name["blk.1.ffn_down.weight"].ne, (std::vector<uint64_t>{192, 64}));
  EXPECT_EQ(by_name["blk.0.attn_norm.weight"].type, 0u);
  EXPECT_EQ(by_name["output_norm.weight"].type, 0u);
  EXPECT_FALSE(by_name.count("output.weight"));
  for (auto& [name, info] : g.tensors) EXPECT_EQ(info.offset % 32, 0u) << name;
  // attn_q holds the permuted rows: compare the f32 export with permute_rope_rows of the weight.
  const std::string out32 = (run / "m32.gguf").string();
  LM_ASSERT_OK(model::export_gguf({run.string(), -1, out32, "f32"}).status());
  auto b32 = read_file(out32);
  LM_ASSERT_OK(b32.status());
  Parsed g32 = parse(*b32);
  std::map<std::string, Parsed::Info> n32(g32.tensors.begin(), g32.tensors.end());
  auto q = model::permute_rope_rows(m->named_parameters()["model.layers.0.self_attn.q_proj.weight"].detach(), cfg.n_heads);
  EXPECT_EQ(std::memcmp(b32->data() + g32.data_start + n32["blk.0.attn_q.weight"].offset, q.data_ptr(), q.numel() * 4), 0);
  // A tokenizer.json without "framing" (the old text + eos): no BOS before a prompt.
  auto meta = read_json_file((run / "tokenizer/tokenizer.json").string());
  LM_ASSERT_OK(meta.status());
  meta->erase("framing");
  LM_ASSERT_OK(write_json_file((run / "tokenizer/tokenizer.json").string(), *meta));
  auto again = model::export_gguf({run.string(), -1, out32, "f32"});  // the file is there: refused, named
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_NE(again.status().message().find("--force"), std::string::npos) << again.status();
  LM_ASSERT_OK(model::export_gguf({run.string(), -1, out32, "f32", false, "auto", /*force=*/true}).status());
  auto b_old = read_file(out32);
  LM_ASSERT_OK(b_old.status());
  EXPECT_EQ(parse(*b_old).kv["tokenizer.ggml.add_bos_token"].second, "0");
  // Errors name the file and say what to do.
  auto bad_type = model::export_gguf({run.string(), -1, out, "q4_0"});
  EXPECT_EQ(bad_type.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(write_file_atomic((run / "tokenizer/spm.model").string(), "placeholder spm bytes").ok());
  auto bad_spm = model::export_gguf({run.string(), -1, out, "f16", false, "auto", /*force=*/true});
  EXPECT_EQ(bad_spm.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad_spm.status().message().find("tokenizer/spm.model"), std::string::npos) << bad_spm.status();
  EXPECT_NE(bad_spm.status().message().find("re-run"), std::string::npos) << bad_spm.status();
  fs::remove_all(run);
}

// What llama.cpp is compared with (run by gguf_check.sh): the run $LM_GGUF_RUN's tokenizer ids for
// the texts of $LM_GGUF_TEXTS ({"tokenize": [...], "logits": [...]}, written by gguf_check.py) and
// the model's fp32 logits on the first 96 ids of each "logits" text (no bos, as prepared shards
// start documents), into $LM_GGUF_OUT/expected_ids.json and expected_logits.safetensors
// ({"logits_<i>": [T, V]}).
TEST(GgufExport, DISABLED_WriteExpected) {
  const char* run = std::getenv("LM_GGUF_RUN");
  const char* texts_json = std::getenv("LM_GGUF_TEXTS");
  const char* out = std::getenv("LM_GGUF_OUT");
  ASSERT_TRUE(run && texts_json && out) << "set LM_GGUF_RUN, LM_GGUF_TEXTS, LM_GGUF_OUT";
  auto cfg = read_json_file(std::string(run) + "/config.json");
  LM_ASSERT_OK(cfg.status());
  model::ModelConfig mc;
  LM_ASSERT_OK(from_json((*cfg)["model"], mc, "model"));
  auto ckpt = train::find_checkpoint(run, -1);
  LM_ASSERT_OK(ckpt.status());
  model::Transformer m(mc);
  LM_ASSERT_OK(train::load_model(*ckpt, m));
  m->eval();
  auto tok = tokenizer::Tokenizer::load(std::string(run) + "/tokenizer");
  LM_ASSERT_OK(tok.status());
  auto texts = read_json_file(texts_json);
  LM_ASSERT_OK(texts.status());
  Json ids = {{"tokenize", Json::array()}, {"logits", Json::array()}};
  for (const auto& t : (*texts)["tokenize"]) ids["tokenize"].push_back(tok->encode(t.get<std::string>()));
  torch::NoGradGuard ng;
  model::NamedTensors logits;
  for (const auto& t : (*texts)["logits"]) {
    auto v = tok->encode(t.get<std::string>());
    v.resize(std::min<size_t>(v.size(), 96));
    ids["logits"].push_back(v);
    auto x = torch::tensor(std::vector<int64_t>(v.begin(), v.end()), torch::kInt64).unsqueeze(0);  // [1, T]
    logits.emplace_back("logits_" + std::to_string(logits.size()), m->forward(x).squeeze(0).to(torch::kFloat32).contiguous());
  }
  LM_ASSERT_OK(write_json_file(std::string(out) + "/expected_ids.json", ids));
  LM_ASSERT_OK(model::save_safetensors(std::string(out) + "/expected_logits.safetensors", logits));
}

}  // namespace
}  // namespace lm
