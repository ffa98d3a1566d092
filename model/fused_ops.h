// Autograd wrappers of lmforge's own CUDA kernels (model/kernels/fused_kernels.h): SwiGLU,
// rotary embedding of q and k in one pass, and residual add + RMSNorm, forward and backward. CUDA tensors only; each has a
// reference twin (F::silu(a) * b; apply_rotary) that model/verify.cpp checks it against at every
// GPU start-up, and the model uses them only when `Transformer::set_cuda_kernels(true)` and the
// tensors are on a GPU. docs/performance.md, "Our own CUDA kernels".
#pragma once

#include <torch/torch.h>

#include <utility>

namespace lm::model {

// True when this build compiled the kernels (LibTorch with CUDA and nvcc at build time).
bool cuda_kernels_compiled();

// silu(gate) * up; gate and up of one shape and dtype (fp32, bf16 or fp16) on one CUDA device.
torch::Tensor fused_swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// q [B, T, Hq, D] and k [B, T, Hk, D] rotated by the [T, D] tables of rotary_tables (the
// "rotate half" layout); returns contiguous tensors of the same shapes. Note the layout: heads
// after time, as the projections produce them before the transpose to [B, H, T, D].
std::pair<torch::Tensor, torch::Tensor> fused_rope(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& cos, const torch::Tensor& sin);

// Residual add + RMSNorm in one pass: s = x + r (the residual stream, x's dtype) and
// y = rms_norm(s) * w in `out_dtype` (fp32 math), with the reference's semantics
// (x + r, then reference_rms_norm). Only for inputs fused_add_rms_norm_takes(): r of
// `out_dtype`, x at least as wide, rows no wider than the kernel takes (8192). Returns {s, y};
// a gradient may reach both: the backward adds the one that reached s.
bool fused_add_rms_norm_takes(const torch::Tensor& x, const torch::Tensor& r, torch::ScalarType out_dtype);
std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& r,
                                                           const torch::Tensor& weight, double eps,
                                                           torch::ScalarType out_dtype);

}  // namespace lm::model
