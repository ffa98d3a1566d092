// Autograd wrappers of lmforge's own kernels: SwiGLU, rotary embedding of q and k in one pass,
// and residual add + RMSNorm, forward and backward, on CUDA (model/kernels/fused_kernels.h) and
// on CPUs (model/kernels/cpu_kernels.h, fp32 and bf16); plus the CPU's plain RMSNorm and the
// softmax cross-entropy rows of the chunked loss. Each has a reference twin (F::silu(a) * b;
// apply_rotary; x + r then reference_rms_norm; log_softmax) that model/verify.cpp checks it
// against at every start-up on the run's own device, and the model uses them only where its
// switches say so (Transformer::set_cuda_kernels, off by default; set_cpu_kernels, on).
// docs/performance.md, "Our own CUDA kernels" and "Our own CPU kernels".
#pragma once

#include <torch/torch.h>

#include <utility>

namespace lm::model {

// True when this build compiled the CUDA kernels (LibTorch with CUDA and nvcc at build time).
bool cuda_kernels_compiled();
// True for tensors the CPU kernels take: on the CPU, fp32 or bf16.
bool cpu_kernels_take(const torch::Tensor& t);

// silu(gate) * up; gate and up of one shape and dtype (fp32, bf16; fp16 on CUDA) on one device.
torch::Tensor fused_swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// q [B, T, Hq, D] and k [B, T, Hk, D] rotated by the [T, D] tables of rotary_tables (the
// "rotate half" layout); returns contiguous tensors of the same shapes. Note the layout: heads
// after time, as the projections produce them before the transpose to [B, H, T, D].
std::pair<torch::Tensor, torch::Tensor> fused_rope(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& cos, const torch::Tensor& sin);

// Residual add + RMSNorm in one pass: s = x + r (the residual stream, x's dtype) and
// y = rms_norm(s) * w in `out_dtype` (fp32 math), with the reference's semantics
// (x + r, then reference_rms_norm). Only for inputs fused_add_rms_norm_takes(): r of
// `out_dtype`, x at least as wide; on CUDA rows no wider than the kernel takes (8192), on the
// CPU fp32 and bf16. Returns {s, y}; a gradient may reach both: the backward adds the one that
// reached s.
bool fused_add_rms_norm_takes(const torch::Tensor& x, const torch::Tensor& r, torch::ScalarType out_dtype);
std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& r,
                                                           const torch::Tensor& weight, double eps,
                                                           torch::ScalarType out_dtype);

// RMSNorm of CPU rows (the add + norm kernel without the add): reference_rms_norm(x, w, eps)
// in `out_dtype` (fp32 or bf16), forward and backward in one pass each.
torch::Tensor cpu_fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps, torch::ScalarType out_dtype);

// Causal self-attention of CPU q, k, v [B, H, T, D] (fp32 or bf16, one shape: grouped-query k, v
// stay on SDPA), scale 1/sqrt(D), one head at a time with its probabilities recomputed in cache
// for the backward. bf16: ATen's flash forward, lmforge's backward; fp32: lmforge's forward and
// backward on BLAS calls in causal row blocks (kernels::cpu::attention_forward_f32), where
// the BLAS is found (else as bf16). cpu_causal_attention_takes says which inputs it accepts.
bool cpu_causal_attention_takes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
torch::Tensor cpu_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
// Where the model uses it (the one place that says so: AttentionImpl and the fast-path registry
// ask here): in the dtypes where it was measured faster than SDPA (docs/performance.md,
// "Attention on the CPU"): bf16, and fp32 where lmforge's own fp32 attention can run.
bool cpu_causal_attention_routes(torch::ScalarType dtype);

// The chunked loss's row work on the CPU, in place: returns the sum over the rows of
// logits [n, V] (contiguous, fp32 or bf16) of -log softmax(row)[target], and with grad_scale
// != 0 overwrites each row with grad_scale * (softmax(row) - onehot(target)) in its dtype. No
// autograd (linear_cross_entropy's Function calls it). Targets int64 [n], each in [0, V).
double cpu_softmax_xent_(const torch::Tensor& logits, const torch::Tensor& targets, double grad_scale);
// -log softmax(logits)[target] per row (fp64 [n]) by the same kernel, the logits left unchanged:
// evaluation's scoring ("cross_entropy.cpu" too). Same argument checks.
torch::Tensor cpu_softmax_xent_rows(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace lm::model
