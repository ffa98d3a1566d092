// The per-element math of lmforge's own CUDA kernels (model/kernels/fused_kernels.cu), shared by
// the kernels and by a host loop in tests/model/fused_kernels_test.cpp: the CPU test checks this
// math and the index arithmetic against the reference ops on every CI run, although the kernels
// themselves run only on a GPU. Plain C++ with no torch and no CUDA headers.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define LM_HD __host__ __device__ __forceinline__
#else
#define LM_HD inline
#endif

namespace lm::kernels {

// SwiGLU (Shazeer 2020): y = silu(a) * b, silu(a) = a * sigmoid(a). Computed in fp32.
LM_HD float swiglu(float a, float b) { return a / (1.0f + expf(-a)) * b; }

// Its gradients for an upstream gradient g: dy/da = b * silu'(a), silu'(a) = s (1 + a (1 - s)),
// s = sigmoid(a); dy/db = silu(a).
LM_HD void swiglu_grad(float a, float b, float g, float* da, float* db) {
  const float s = 1.0f / (1.0f + expf(-a));
  *da = g * b * s * (1.0f + a * (1.0f - s));
  *db = g * a * s;
}

// Rotary embedding of one (x1, x2) pair, x1 = x[i] and x2 = x[i + D/2] (the "rotate half" layout
// of model/transformer.cpp's apply_rotary and of Hugging Face's Llama): y1 = x1 c - x2 s,
// y2 = x2 c + x1 s. The backward pass is the inverse rotation: the same with -s.
LM_HD void rope_pair(float x1, float x2, float c, float s, float* y1, float* y2) {
  *y1 = x1 * c - x2 * s;
  *y2 = x2 * c + x1 * s;
}

// Pair n of a contiguous [B, T, H, D] tensor (n over B*T*H*(D/2)): the element offset of its x1
// (x2 is D/2 further) and its position t and frequency index i, which pick cos/sin[t, i] from the
// [T, D] tables (their two halves are equal).
struct RopeIndex {
  int64_t offset;
  int64_t t;
  int64_t i;
};
LM_HD RopeIndex rope_index(int64_t n, int64_t T, int64_t H, int64_t D) {
  const int64_t half = D / 2;
  const int64_t i = n % half;
  const int64_t row = n / half;  // (b, t, h) flattened
  const int64_t t = (row / H) % T;
  return RopeIndex{row * D + i, t, i};
}

// RMSNorm of one row after the residual add (the kernels' add_rms_norm): s = x + r is the new
// residual stream, y = s * rstd * w with rstd = 1 / sqrt(mean(s^2) + eps), all in fp32 from the
// stored (rounded) s, as the reference normalises what the add stored.
LM_HD float rms_rstd(float sum_sq, int64_t C, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(C) + eps);
}
LM_HD float rms_norm_out(float s, float rstd, float w) { return s * rstd * w; }

// The gradient of s for one element, given dy, n = s * rstd and the row's mean of (dy * w * n):
// ds = rstd * (dy w - n * mean(dy w n)) + ds_in, where ds_in is the gradient that reached s
// itself (the residual stream's later uses). The weight's gradient collects dy * n over rows.
LM_HD float rms_norm_grad(float dy, float w, float n, float rstd, float mean_gn, float ds_in) {
  return rstd * (dy * w - n * mean_gn) + ds_in;
}

}  // namespace lm::kernels
