// lmforge's own CUDA kernels for memory-bound work ATen has no single op for (issue 22, item 4):
// SwiGLU forward and backward, rotary embedding of q and k in one pass, and the residual add with
// the RMSNorm after it. Raw pointers and a CUDA stream, no torch types: the .cu file compiles with
// nvcc alone, fast. model/fused_ops.h wraps
// them as autograd functions; each has a reference twin in model/verify.cpp's registry, checked at
// every GPU start-up. Compiled when LibTorch has CUDA (LM_HAVE_CUDA_KERNELS).
#pragma once

#include <cstdint>

namespace lm::kernels {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// Each returns a cudaError_t as int: 0 = launched, > 0 = this launch failed, < 0 = -(the error an
// earlier asynchronous operation left pending, found before this launch, which did not happen;
// not this kernel's fault). error_string() names either.
const char* error_string(int err);

// y = silu(a) * b over n elements (a, b, y contiguous, of `dt`).
int swiglu_forward(const void* a, const void* b, void* y, int64_t n, DType dt, void* stream);
// da, db for upstream g (all contiguous, of `dt`).
int swiglu_backward(const void* a, const void* b, const void* g, void* da, void* db, int64_t n, DType dt,
                    void* stream);

// Rotates q [B, T, Hq, D] and k [B, T, Hk, D] (contiguous, of `dt`) into yq, yk by cos/sin [T, D]
// (fp32, contiguous); `inverse` rotates by -theta (the backward pass). One launch for both.
int rope_forward(const void* q, const void* k, void* yq, void* yk, const float* cos, const float* sin, int64_t B,
                 int64_t T, int64_t Hq, int64_t Hk, int64_t D, bool inverse, DType dt, void* stream);

// Residual add + RMSNorm in one pass per row (rows x C, all contiguous): s = x + r (stored in
// x's dtype `residual`), y = s * rstd * w in `compute` (r's dtype too), w fp32 [C], and the
// row's rstd (fp32 [rows]) kept for the backward. C at most kAddRmsNormMaxCols (the backward
// keeps a block's share of dw, C floats, in shared memory).
constexpr int64_t kAddRmsNormMaxCols = 8192;
int add_rms_norm_forward(const void* x, const void* r, const float* w, void* s, void* y, float* rstd, int64_t rows,
                         int64_t C, float eps, DType residual, DType compute, void* stream);
// Its backward: ds (= dx = dr, in `residual`) from dy (`compute`) and ds_in (the gradient that
// reached s itself, `residual`; may be null), and the weight's gradient as `blocks` partial rows
// dw_partial [blocks, C] fp32 (their sum over rows is dw; deterministic, no atomics).
int add_rms_norm_backward(const void* dy, const void* ds_in, const void* s, const float* w, const float* rstd,
                          void* ds, float* dw_partial, int64_t rows, int64_t C, int64_t blocks, DType residual,
                          DType compute, void* stream);

}  // namespace lm::kernels
