#include "model/config.h"

namespace lm::model {

absl::Status validate(const ModelConfig& c) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("model." + m); };
  if (c.vocab_size <= 0) return bad("vocab_size must be positive");
  if (c.d_model <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.d_ff <= 0)
    return bad("d_model, n_layers, n_heads and d_ff must be positive");
  if (c.head_dim_override < 0) return bad(absl::StrCat("head_dim: ", c.head_dim_override, " must be >= 0 (0 = d_model/n_heads)"));
  if (c.head_dim_override == 0 && c.d_model % c.n_heads != 0)
    return bad(absl::StrCat("n_heads: ", c.n_heads, " does not divide d_model ", c.d_model, " (or set head_dim)"));
  if (c.head_dim() % 2 != 0) return bad(absl::StrCat("head_dim: ", c.head_dim(), " must be even for rotary"));
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    return bad(absl::StrCat("n_kv_heads: ", c.n_kv_heads, " must divide n_heads ", c.n_heads));
  if (c.max_seq_len <= 0) return bad("max_seq_len must be positive");
  if (c.attention != "fused" && c.attention != "reference")
    return bad("attention: expected \"fused\" or \"reference\", got \"" + c.attention + "\"");
  if (c.architecture != "llama" && c.architecture != "qwen2")
    return bad("architecture: expected \"llama\" or \"qwen2\", got \"" + c.architecture + "\"");
  if (c.attention_bias && c.architecture != "qwen2")
    return bad("attention_bias: q/k/v biases are Qwen2's (architecture \"qwen2\"); Llama's attention_bias also biases o_proj, which lmforge does not model");
  const RopeScaling& r = c.rope_scaling;
  if (r.type != "default" && r.type != "llama3")
    return bad("rope_scaling.type: expected \"default\" or \"llama3\", got \"" + r.type + "\"");
  if (r.type == "llama3" && !(r.factor > 0 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
                              r.original_max_position_embeddings > 0))
    return bad("rope_scaling: llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
  return absl::OkStatus();
}

std::vector<std::string> preset_names() { return {"tiny", "small", "124m", "400m", "1b"}; }

absl::StatusOr<ModelConfig> preset(const std::string& name) {
  ModelConfig c;
  c.preset = name;
  if (name == "tiny") {
    c.vocab_size = 512; c.d_model = 64; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2;
    c.d_ff = 192; c.max_seq_len = 128;
  } else if (name == "small") {
    c.vocab_size = 8192; c.d_model = 256; c.n_layers = 6; c.n_heads = 8; c.n_kv_heads = 8;
    c.d_ff = 768; c.max_seq_len = 256;
  } else if (name == "124m") {
    c.vocab_size = 32000; c.d_model = 768; c.n_layers = 12; c.n_heads = 12; c.n_kv_heads = 12;
    c.d_ff = 2048; c.max_seq_len = 1024;
  } else if (name == "400m") {
    c.vocab_size = 32000; c.d_model = 1024; c.n_layers = 24; c.n_heads = 16; c.n_kv_heads = 16;
    c.d_ff = 3072; c.max_seq_len = 2048; c.tie_embeddings = false;
  } else if (name == "1b") {
    c.vocab_size = 32000; c.d_model = 2048; c.n_layers = 22; c.n_heads = 32; c.n_kv_heads = 8;
    c.d_ff = 5632; c.max_seq_len = 2048;
  } else {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    return absl::InvalidArgumentError("unknown preset '" + name + "' (known: " + names + ")");
  }
  return c;
}

PresetTraining preset_training(const std::string& name) {
  PresetTraining t;  // tiny, small, custom: the CPU demo (struct defaults)
  t.source = "CPU demo (scripts/demo.sh)";
  if (name == "124m") {
    // llm.c scripts/run_gpt2_124M.sh: -b 64 -t 1024 -d 524288 -l 0.0006 -u 700 -q 0.0 -c 0.1, 10B tokens.
    t = {"h100", 10e9, 0, 64, 1024, 524288, 6e-4, 700, 0.0, 0.1, 250, 0, 30, "llm.c GPT-2 124M"};
  } else if (name == "400m") {
    // llm.c scripts/run_gpt2_350M.sh (d24, the closest anchor): lr 3e-4, warmup 700, decay to 0,
    // wd 0.1, 524288-token batch; sequence 2048 as the preset's max; micro-batch 16, the largest
    // power of two that fits an 80 GB H100 in bf16 by `lmtrain plan`'s estimate (tests/train/
    // plan_test.cpp holds that); 8B tokens = 20 per parameter (Hoffmann et al. 2022).
    t = {"h100", 8e9, 0, 16, 2048, 524288, 3e-4, 700, 0.0, 0.1, 250, 0, 30, "llm.c GPT-2 350M, Chinchilla budget"};
  } else if (name == "1b") {
    // TinyLlama 1.1B (Zhang et al. 2024), the same shape: lr 4e-4, warmup 2000, cosine to 4e-5,
    // wd 0.1, sequence 2048, 2M-token batch; 22B tokens = 20 per parameter.
    t = {"h100", 22e9, 0, 8, 2048, 2097152, 4e-4, 2000, 0.1, 0.1, 500, 0, 30, "TinyLlama 1.1B, Chinchilla budget"};
  }
  return t;
}

int64_t param_count(const ModelConfig& c) {
  const int64_t hd = c.head_dim();
  const int64_t attn = c.d_model * hd * c.n_heads        // q_proj
                       + 2 * c.d_model * hd * c.n_kv_heads  // k_proj, v_proj
                       + c.n_heads * hd * c.d_model;        // o_proj
  const int64_t bias = c.attention_bias ? hd * (c.n_heads + 2 * c.n_kv_heads) : 0;  // q, k, v biases
  const int64_t mlp = 3 * c.d_model * c.d_ff;               // gate, up, down
  const int64_t norms = 2 * c.d_model;
  const int64_t emb = c.vocab_size * c.d_model;
  return emb + (c.tie_embeddings ? 0 : emb) + c.n_layers * (attn + bias + mlp + norms) + c.d_model;
}

int64_t matmul_param_count(const ModelConfig& c) {
  const int64_t emb = c.vocab_size * c.d_model;
  // Untied: drop the lookup table, keep the head. Tied: the one matrix is the head.
  return c.tie_embeddings ? param_count(c) : param_count(c) - emb;
}

double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  return 6.0 * static_cast<double>(matmul_param_count(c)) +
         12.0 * static_cast<double>(c.n_layers) * static_cast<double>(seq_len) *
             static_cast<double>(c.attn_dim());
}

}  // namespace lm::model
