// lmforge's own CUDA kernels for memory-bound work ATen has no single op for (issue 22, item 4):
// SwiGLU forward and backward, and rotary embedding of q and k in one pass. Raw pointers and a
// CUDA stream, no torch types: the .cu file compiles with nvcc alone, fast. model/fused_ops.h wraps
// them as autograd functions; each has a reference twin in model/verify.cpp's registry, checked at
// every GPU start-up. Compiled when LibTorch has CUDA (LM_HAVE_CUDA_KERNELS).
#pragma once

#include <cstdint>

namespace lm::kernels {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// Each returns a cudaError_t as int (0 = launched); error_string() names it.
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

}  // namespace lm::kernels
