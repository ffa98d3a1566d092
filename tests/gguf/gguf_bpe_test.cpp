// Export of imported runs to GGUF (issue 37): llama.cpp's pre-tokenizer name for a split pattern,
// the byte-level BPE vocabulary as llama.cpp's token arrays, llama3 rope's rope_freqs factors, and
// the biases' tensor names. llama.cpp itself runs in tests/export/cpt_export_check.py.
#include <gtest/gtest.h>

#include <cmath>

#include "core/config.h"
#include "model/gguf_bpe.h"
#include "model/gguf_export.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "tokenizer/pretokenize.h"

namespace lm {
namespace {

TEST(GgufBpe, PreTokenizerNamesFollowTheSplitPatternAndIgnoreMerges) {
  EXPECT_EQ(*model::llama_cpp_pre(tokenizer::kLlama3Pattern, true, "t"), "llama-bpe");
  EXPECT_EQ(*model::llama_cpp_pre(tokenizer::kQwen2Pattern, false, "t"), "qwen2");
  EXPECT_EQ(*model::llama_cpp_pre(tokenizer::kQwen35Pattern, false, "t"), "qwen35");
  // llama.cpp's own "gpt-4o" drops \p{M} from words (197 of 300 Bangla lines differed): not used.
  EXPECT_EQ(*model::llama_cpp_pre(tokenizer::kGpt4oPattern, true, "t"), "granite-embed-multi-97m");
  // A GGUF cannot carry ignore_merges: a mismatch with the name's is refused, naming the field.
  auto mismatch = model::llama_cpp_pre(tokenizer::kGpt4oPattern, false, "tok/hf-tokenizer.json");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("ignore_merges"), std::string::npos) << mismatch.status();
  // Llama 3's pattern with \p{M} (tokenizer --extend --split llama3-marks): no llama.cpp pre-tokenizer.
  const std::string marks =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{M}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  auto refused = model::llama_cpp_pre(marks, true, "tok/hf-tokenizer.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  for (const char* want : {"tok/hf-tokenizer.json", "llama.cpp", "--split gpt-4o", "llama3-marks", "--format hf"})
    EXPECT_NE(refused.status().message().find(want), std::string::npos) << want << ": " << refused.status();
}

TEST(GgufBpe, VocabularyFillsEveryRowAndTypesAddedTokens) {
  const Json j = {
      {"model", {{"type", "BPE"}, {"ignore_merges", true},
                 {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", Json::array({"a b", Json::array({"ab", "b"})})}}},
      {"added_tokens", Json::array({Json{{"id", 4}, {"content", "<|end|>"}, {"special", true}},
                                    Json{{"id", 5}, {"content", "<|x|>"}, {"special", false}},
                                    Json{{"id", 6}, {"content", "\xe2\x96\x81hi"}, {"special", false}}})},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", Json::array({
          Json{{"type", "Split"}, {"pattern", {{"Regex", tokenizer::kLlama3Pattern}}}, {"behavior", "Isolated"}},
          Json{{"type", "ByteLevel"}, {"use_regex", false}}})}}}};
  auto v = model::read_bpe_vocab(j.dump(), 8, "t.json");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"a", "b", "ab", "[PAD3]", "<|end|>", "<|x|>", " hi", "[PAD7]"}));
  EXPECT_EQ(v->types, (std::vector<int32_t>{1, 1, 1, 5, 3, 3, 4, 5}));  // <|x|> looks special: control
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "ab b"}));
  EXPECT_EQ(v->pattern, tokenizer::kLlama3Pattern);
  EXPECT_TRUE(v->ignore_merges);
  // Fewer rows than ids: the tokenizer does not belong to the model.
  auto small = model::read_bpe_vocab(j.dump(), 5, "t.json");
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("'<|x|>' has id 5 but the model has 5 embedding rows"), std::string::npos)
      << small.status();
}

TEST(GgufBpe, Llama3RopeFactorsDivideToTransformersFrequencies) {
  model::ModelConfig c;
  c.d_model = 64, c.n_heads = 4, c.head_dim_override = 32, c.rope_theta = 500000.0;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 32.0, c.rope_scaling.original_max_position_embeddings = 64;
  const std::vector<float> f = model::llama3_rope_factors(c);
  ASSERT_EQ(f.size(), 16u);
  model::RopeScaling none;
  const auto plain = model::rope_inverse_frequencies(32, c.rope_theta, none, torch::kCPU);
  const auto scaled = model::rope_inverse_frequencies(32, c.rope_theta, c.rope_scaling, torch::kCPU);
  // llama.cpp rotates by theta_i / factor_i: that must be transformers' llama3 frequencies.
  const auto via_factors = plain / torch::tensor(f);
  EXPECT_TRUE(torch::allclose(via_factors, scaled, 1e-6, 0)) << via_factors << scaled;
  EXPECT_EQ(f.front(), 1.0f);   // the highest frequency is not scaled
  EXPECT_EQ(f.back(), 32.0f);   // the lowest by the whole factor
  EXPECT_GT(f[8], 1.0f);        // one in between is smoothed
}

TEST(GgufBpe, Qwen2BiasesHaveLlamaCppNames) {
  EXPECT_EQ(model::gguf_tensor_name("model.layers.2.self_attn.q_proj.bias"), "blk.2.attn_q.bias");
  EXPECT_EQ(model::gguf_tensor_name("model.layers.0.self_attn.v_proj.bias"), "blk.0.attn_v.bias");
  model::ModelConfig c;
  c.architecture = "qwen2", c.attention_bias = true;
  model::Transformer m(c);
  for (auto& [name, t] : model::module_state(*m)) EXPECT_NE(model::gguf_tensor_name(name), "") << name;
}

}  // namespace
}  // namespace lm
