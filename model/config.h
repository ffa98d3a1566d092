// Model configuration, presets, exact parameter counts and training FLOPs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::model {

// Rotary frequency scaling (HF `rope_scaling` / `rope_parameters`). "default": plain RoPE.
// "llama3": Llama 3.1/3.2's wavelength-dependent scaling (transformers'
// _compute_llama3_parameters in modeling_rope_utils.py; rope_inverse_frequencies applies it).
struct RopeScaling {
  std::string type = "default";  // "default" or "llama3"
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  template <class V>
  void visit(V& v) {
    v("type", type);
    v("factor", factor);
    v("low_freq_factor", low_freq_factor);
    v("high_freq_factor", high_freq_factor);
    v("original_max_position_embeddings", original_max_position_embeddings);
  }
};

struct ModelConfig {
  std::string preset = "custom";
  // The Hugging Face family the weights follow: "llama" (LlamaForCausalLM) or "qwen2"
  // (Qwen2ForCausalLM: q/k/v biases). Export writes it back (model/hf_import.h reads it).
  std::string architecture = "llama";
  int64_t vocab_size = 512;
  int64_t d_model = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 4;  // < n_heads: grouped-query attention (each kv head serves n_heads/n_kv_heads)
  int64_t d_ff = 192;      // SwiGLU hidden width
  int64_t max_seq_len = 128;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  double init_std = 0.02;
  std::string attention = "fused";  // "fused" (SDPA on LibTorch >= 2) or "reference"
  int64_t head_dim_override = 0;    // JSON "head_dim"; 0 = d_model / n_heads (Llama 3.2 3B: 128 vs 3072/24)
  bool attention_bias = false;      // q/k/v projections with biases (Qwen2; o_proj never)
  RopeScaling rope_scaling;

  int64_t head_dim() const { return head_dim_override > 0 ? head_dim_override : d_model / n_heads; }
  // Width of the attention's concatenated heads: n_heads * head_dim (d_model unless head_dim is explicit).
  int64_t attn_dim() const { return n_heads * head_dim(); }

  template <class V>
  void visit(V& v) {
    v("preset", preset);
    v("vocab_size", vocab_size);
    v("d_model", d_model);
    v("n_layers", n_layers);
    v("n_heads", n_heads);
    v("n_kv_heads", n_kv_heads);
    v("d_ff", d_ff);
    v("max_seq_len", max_seq_len);
    v("rope_theta", rope_theta);
    v("norm_eps", norm_eps);
    v("tie_embeddings", tie_embeddings);
    v("init_std", init_std);
    v("attention", attention);
    v("architecture", architecture);
    v("head_dim", head_dim_override);
    v("attention_bias", attention_bias);
    v("rope_scaling", rope_scaling);
  }
};

// Checks the shape constraints (heads divide d_model, kv heads divide heads, ...).
absl::Status validate(const ModelConfig& cfg);

// tiny (tests, < 1M params), small (CPU demo, ~7M), 124m, 400m (the reference report), 1b.
absl::StatusOr<ModelConfig> preset(const std::string& name);
std::vector<std::string> preset_names();

// The training defaults a preset carries for the hardware it is meant for (one row per preset in
// model/config.cpp, next to its shape; where each number comes from: docs/gpu.md, "Preset
// defaults"). tiny/small keep the CPU demo's settings; 124m/400m/1b are for one 80 GB GPU and up.
// `lmtrain fit` starts from the row, then config.json's "train", then flags (train/config.h).
struct PresetTraining {
  const char* hardware = "cpu";  // "cpu" or the GPU the micro-batch was sized for ("h100")
  double tokens = 0;             // budget; 0 = use `steps`
  int64_t steps = 200;
  int64_t micro_batch = 8;       // sequences per rank per micro-batch
  int64_t seq_len = 128;
  int64_t batch_tokens = 0;      // global batch (grad_accum derived per world size); 0 = grad_accum 1
  double lr = 3e-3;
  int64_t warmup_steps = 20;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.1;
  int64_t eval_interval = 100;
  int64_t checkpoint_interval = 100;  // steps; 0 = off
  // Wall clock; 0 = off. Every preset checkpoints by time: a loaded CPU can take minutes for the
  // 100 steps above, and a kill then lost all of them (issue 30 item 9).
  double checkpoint_minutes = 5;
  const char* source = "";            // the anchor the numbers follow
};
// The row of `name`; presets of a --model-config ("custom") get the CPU demo's row.
PresetTraining preset_training(const std::string& name);

// Exact number of trainable parameters of Transformer(cfg) (tied embedding counted once).
int64_t param_count(const ModelConfig& cfg);

// Parameters that take part in matmuls: everything but the input embedding lookup, plus the
// LM head (which for tied embeddings is the embedding matrix). This is the N of 6N.
int64_t matmul_param_count(const ModelConfig& cfg);

// Training FLOPs per token at sequence length `seq_len`: 6N + 12·L·T·d, d = n_heads·head_dim
// (d_model unless head_dim is explicit)
// (forward 2N + backward 4N for the matmuls, plus QK^T and AV: PaLM paper, appendix B).
double train_flops_per_token(const ModelConfig& cfg, int64_t seq_len);

}  // namespace lm::model
