// Llama-style decoder-only transformer as a torch::nn::Module.
//
// Registered names equal the Hugging Face Llama names (model.embed_tokens.weight,
// model.layers.0.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight), so a
// checkpoint exports without renaming. Rotary embeddings use the Hugging Face "rotate_half"
// convention (first and second half of each head), so no q/k permutation is needed on export.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"

namespace lm::model {

// Fast paths can be broken on purpose for the start-up verification's tests (model/verify.h):
// the named path ("attention.sdpa", "rms_norm.aten", "loss.chunked", "swiglu.cuda", "rope.cuda",
// "add_rms_norm.cuda", "rms_norm.cpu", "add_rms_norm.cpu", "swiglu.cpu", "rope.cpu",
// "cross_entropy.cpu") then scales its output by
// 1.05. Empty (the default) breaks nothing; a process-wide setting, read on every call.
void set_debug_break_fast_path(const std::string& name);
bool debug_break_fast_path(const char* name);

// RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, computed in fp32.
// The reference is four element-wise ops; on CUDA the fast path is ATen's rms_norm (one fused
// kernel forward and backward, _fused_rms_norm). On CPUs the fast path is lmforge's own kernel
// (cpu_fused_rms_norm in model/fused_ops.h, "rms_norm.cpu").
torch::Tensor reference_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  bool use_fused = true;  // on CUDA only
  bool use_cpu_kernel = true;  // lmforge's CPU kernel on fp32/bf16 CPU tensors
  double eps() const { return eps_; }

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary inverse frequencies [head_dim/2] (fp32): theta^(-2i/D), rescaled per `scaling`
// (llama3: transformers' _compute_llama3_parameters).
torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling,
                                       torch::Device device);
// Rotary tables for positions [offset, offset+T): cos, sin: [T, head_dim] (RoFormer, Su et al. 2021).
std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t seq_len, int64_t head_dim,
                                                      double theta, int64_t offset,
                                                      torch::Device device,
                                                      const RopeScaling& scaling = {});
// x: [B, H, T, D] -> x * cos + rotate_half(x) * sin
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos,
                           const torch::Tensor& sin);

// Causal attention: q, k, v: [B, H, T, D] (k, v already expanded to H heads) -> [B, H, T, D].
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, bool causal = true);
// Fused causal attention (scaled_dot_product_attention). k, v may have fewer heads than q
// (grouped-query, H divisible by Hkv): they are used without being repeated.
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v);
// Restricts the kernels SDPA may choose on CUDA to one: "flash", "cudnn", "efficient" or "math";
// "auto" allows all (ATen's priority order). Process-wide (ATen's global context). Returns false
// for an unknown name.
bool set_sdpa_backend(const std::string& name);
bool is_sdpa_backend(const std::string& name);
// Mean next-token cross-entropy of logits = h · wᵀ, without materialising the [N, V] logits
// for autograd: rows are processed in chunks that stay in cache, the log-softmax runs in fp32,
// and the gradient of the logits ((softmax - onehot) / N, in the compute dtype) is formed in the
// same pass, so the backward is two matmuls. h: [N, C], w: [V, C], targets: [N] int64.
// Compute dtype: the autocast dtype when autocast is on for h's device, else h's dtype.
// chunk_rows 0 picks ~64 MB of fp32 logits per chunk on CPU, 1 GB on GPUs. cpu_kernel: on fp32
// or bf16 CPU tensors each chunk's softmax, loss and gradient are one pass of lmforge's kernel
// over the rows (cpu_softmax_xent_, "cross_entropy.cpu") instead of the ATen ops.
torch::Tensor linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& w,
                                   const torch::Tensor& targets, int64_t chunk_rows = 0,
                                   bool cpu_kernel = false);
// The reference it must equal: nll_loss(log_softmax(h · wᵀ in fp32)).
torch::Tensor reference_linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& w,
                                             const torch::Tensor& targets);

// Keys and values of the positions already seen, per layer, for incremental decoding.
// k[l], v[l]: [B, Hkv, length, D] (before the grouped-query expansion). Empty until first use.
struct KVCache {
  std::vector<torch::Tensor> k, v;
  int64_t length = 0;  // positions cached; the next token's rotary position
  void clear() { k.clear(); v.clear(); length = 0; }
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& cfg);
  // x: [B, T, C] -> [B, T, C]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  // x: [B, Tn, C] new positions; cos/sin for positions [offset, offset+Tn); appends this layer's
  // k, v to *k_cache, *v_cache ([B, Hkv, Tp, D] -> [B, Hkv, Tp+Tn, D]) and attends over all of them.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, torch::Tensor* k_cache,
                               torch::Tensor* v_cache);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  bool use_fused = true;
  bool use_cuda_rope = false;  // lmforge's rotary kernel for q and k (model/fused_ops.h), CUDA only
  bool use_cpu_rope = true;    // the same on fp32/bf16 CPU tensors
  bool use_cpu_attention = true;  // cpu_causal_attention (model/fused_ops.h) on bf16 CPU tensors, no GQA
  bool debug_break_causality = false;  // for the causality test only: drops the mask

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelConfig& cfg);
  // SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  bool use_cuda_swiglu = false;  // lmforge's SwiGLU kernel (model/fused_ops.h), CUDA only
  bool use_cpu_swiglu = true;    // the same on fp32/bf16 CPU tensors
};
TORCH_MODULE(MLP);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, torch::Tensor* k_cache,
                               torch::Tensor* v_cache);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(Block);

// The "model." prefix of Hugging Face names.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelConfig& cfg);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Decoder);

class TransformerImpl : public torch::nn::Module {
 public:
  // The weights are drawn once, by init_weights(seed) (lmtrain fit passes train.seed); with
  // draw_weights false they keep LibTorch's module defaults, for a caller that overwrites every
  // one (model/hf_import.h: drawing a 1B model's weights took seconds and a temporary of the
  // largest matrix).
  explicit TransformerImpl(const ModelConfig& cfg, uint64_t seed = 0, bool draw_weights = true);

  // tokens: [B, T] int64 -> logits [B, T, V] (fp32 unless autocast says otherwise)
  torch::Tensor forward(const torch::Tensor& tokens);
  // Final hidden states before the LM head: [B, T, C].
  torch::Tensor hidden(const torch::Tensor& tokens);
  torch::Tensor head(const torch::Tensor& h);
  // window: [B, T+1] -> mean next-token cross entropy over B*T positions (nats).
  torch::Tensor loss(const torch::Tensor& window);
  // Incremental decoding: tokens [B, Tn] are positions [cache.length, cache.length+Tn); returns
  // their logits [B, Tn, V] and extends the cache. Equals forward() on the whole sequence
  // (tests/export: KvCache*). Call under NoGradGuard in eval mode.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KVCache& cache);

  // Re-draws every weight from the documented initialisation with `seed`.
  void init_weights(uint64_t seed);
  // How many times init_weights ran in this process (tests: fit initialises its model once).
  static int64_t init_weights_calls();
  // Switches every attention layer between the fused and the reference path.
  void set_fused_attention(bool on);
  // Switches every RMSNorm between ATen's fused kernel (CUDA) and the reference.
  void set_fused_rms_norm(bool on);
  // Switches loss() between the chunked linear_cross_entropy and the reference.
  void set_chunked_loss(bool on) { chunked_loss_ = on; }
  // Activation recompute per block (model/recompute.h): each block keeps only its inputs for
  // backward and runs its forward again there. Gradients are bit-identical either way.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }
  bool fused_attention() const;  // the first layer's switch (all layers share it)
  bool fused_rms_norm() const;
  bool chunked_loss() const { return chunked_loss_; }
  // lmforge's own CUDA kernels (model/fused_ops.h; off by default until measured on a GPU,
  // train.hardware.cuda_kernels): SwiGLU, rotary q/k, and each residual add with the RMSNorm
  // after it. They act on CUDA tensors only, and set_cuda_kernels(true) is refused (false
  // returned) by a build without them.
  bool set_cuda_kernels(bool on);
  void set_cuda_swiglu(bool on);
  void set_cuda_rope(bool on);
  void set_cuda_add_norm(bool on) { cuda_add_norm_ = on; }
  bool cuda_swiglu() const { return cuda_swiglu_; }
  bool cuda_rope() const { return cuda_rope_; }
  bool cuda_add_norm() const { return cuda_add_norm_; }
  // lmforge's own CPU kernels (model/fused_ops.h; on by default, checked against their
  // references at every start-up like the CUDA ones; train.hardware.fast_paths_off turns each
  // off): RMSNorm, each residual add with the norm after it, SwiGLU, rotary q/k, and the
  // cross-entropy rows of the chunked loss. They act on fp32 and bf16 CPU tensors only.
  void set_cpu_kernels(bool on);
  void set_cpu_rms_norm(bool on);
  void set_cpu_add_norm(bool on) { cpu_add_norm_ = on; }
  void set_cpu_swiglu(bool on);
  void set_cpu_rope(bool on);
  void set_cpu_attention(bool on);
  void set_cpu_cross_entropy(bool on) { cpu_xent_ = on; }
  bool cpu_rms_norm() const { return model->norm->use_cpu_kernel; }
  bool cpu_add_norm() const { return cpu_add_norm_; }
  bool cpu_swiglu() const { return cpu_swiglu_; }
  bool cpu_rope() const { return cpu_rope_; }
  // Where the attention path is fused (SDPA) and the heads are not grouped (n_kv_heads ==
  // n_heads): the CPU backward of cpu_causal_attention.
  bool cpu_attention() const { return cpu_attention_ && cfg_.n_kv_heads == cfg_.n_heads; }
  bool cpu_cross_entropy() const { return cpu_xent_; }
  void set_debug_break_causality(bool on);

  const ModelConfig& config() const { return cfg_; }

  Decoder model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when embeddings are tied

 private:
  ModelConfig cfg_;
  bool chunked_loss_ = true;
  bool recompute_ = false;
  bool cuda_swiglu_ = false, cuda_rope_ = false, cuda_add_norm_ = false;
  bool cpu_swiglu_ = true, cpu_rope_ = true, cpu_add_norm_ = true, cpu_xent_ = true, cpu_attention_ = true;
  // hidden() with each residual add fused into the RMSNorm after it.
  torch::Tensor hidden_add_norm(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin);
  // One block's step of either loop: with recompute_, through model::recompute.
  std::vector<torch::Tensor> run_block(const BlockFn& fn, const std::vector<torch::Tensor>& in);
  // Block l of the regrouped loop: (residual, its norm for block l) -> the same for block l + 1.
  std::pair<torch::Tensor, torch::Tensor> add_norm_block(size_t l, const torch::Tensor& x, const torch::Tensor& normed,
                                                         const torch::Tensor& cos, const torch::Tensor& sin);
};
TORCH_MODULE(Transformer);

// Forwards of `batch` x `tokens` ids on the model's device, without gradients: the work that
// runtime/threads.h times at 1 thread and at all cores to choose a command's thread count. Each
// call runs up to `repeats` forwards, fewer once `cap_s` has passed (a count that stalls stops
// early), and returns how many it ran. Several short forwards sample a busy machine's stalls better
// than one.
std::function<int()> forward_probe(Transformer m, int64_t batch, int64_t tokens, int repeats = 4, double cap_s = 0.04);

}  // namespace lm::model
