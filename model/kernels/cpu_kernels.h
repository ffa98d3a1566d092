// lmforge's own CPU kernels for the training step's memory-bound work (issue 32): the CPU twins
// of model/kernels/fused_kernels.h's CUDA kernels (SwiGLU, rotary q/k, residual add + RMSNorm)
// and the softmax cross-entropy of the chunked loss's rows. Raw pointers, no torch types; each
// call splits its rows (or elements) over ATen's intra-op threads (at::parallel_for), and each
// loop is compiled for AVX-512, AVX2+FMA and baseline x86-64 with the one the CPU supports
// picked at load time (GCC target_clones). fp32 arithmetic on fp32 or bf16 storage; the
// per-element math is model/kernels/fused_math.h's. model/fused_ops.h wraps them as autograd
// functions checked against their references at every start-up (model/verify.cpp).
#pragma once

#include <cstdint>
#include <functional>

#include "model/kernels/fused_kernels.h"  // DType

namespace lm::kernels::cpu {

// True when the storage dtype is one these kernels take (fp32, bf16).
bool takes(DType dt);

// y = silu(a) * b over n contiguous elements of `dt`.
void swiglu_forward(const void* a, const void* b, void* y, int64_t n, DType dt);
// da = g b silu'(a), db = g silu(a).
void swiglu_backward(const void* a, const void* b, const void* g, void* da, void* db, int64_t n, DType dt);

// q [B, T, Hq, D] and k [B, T, Hk, D] (contiguous, `dt`) rotated into yq, yk by cos/sin [T, D]
// (fp32, "rotate half" layout); `inverse` rotates by -theta (the backward pass).
void rope(const void* q, const void* k, void* yq, void* yk, const float* cos, const float* sin, int64_t B, int64_t T,
          int64_t Hq, int64_t Hk, int64_t D, bool inverse, DType dt);

// Per row of C: s = x + r stored in `residual` (x's dtype; with r null, s is x and not written),
// y = s * rstd * w in `compute`, rstd = 1 / sqrt(mean(s^2) + eps) kept (fp32 [rows]).
void add_rms_norm_forward(const void* x, const void* r, const float* w, void* s, void* y, float* rstd, int64_t rows,
                          int64_t C, float eps, DType residual, DType compute);
// ds = rstd (dy w - n mean(dy w n)) + ds_in, n = s rstd (ds in `residual`, dy in `compute`,
// ds_in in `residual` or null), and dw = sum over rows of dy n (fp32 [C]), summed in fixed
// blocks of rows so the result does not depend on the thread count.
void add_rms_norm_backward(const void* dy, const void* ds_in, const void* s, const float* w, const float* rstd,
                           void* ds, float* dw, int64_t rows, int64_t C, DType residual, DType compute);

// Softmax cross-entropy of n rows of V logits (contiguous, `dt`) against targets (int64, each
// in [0, V)): returns the sum over rows of -log softmax(row)[target] (exact log-sum-exp in fp32,
// no underflow fallback needed), and with `grad_scale` != 0 overwrites each row with
// grad_scale * (softmax(row) - onehot(target)) in `dt`.
double softmax_xent(void* logits, const int64_t* targets, int64_t n, int64_t V, float grad_scale, DType dt);
// The same per row, no gradient, logits left as they are: nats[i] = -log softmax(row i)[target i]
// (what evaluation scores).
void softmax_xent_rows(const void* logits, const int64_t* targets, int64_t n, int64_t V, double* nats, DType dt);

// fn(lo, hi) over ranges of [0, n) on ATen's intra-op threads: at::parallel_for splits work only
// where it is compiled with OpenMP, as this library is (lm_model is not); ATen ops called inside
// run single-threaded.
void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The element-wise parts of one attention head's backward pass (model/fused_ops.cpp's
// cpu_causal_attention does the matmuls) on `rows` query rows, the first being row `row0` of the
// sequence, against keys 0 .. `cols`-1; the [rows, cols] fp32 blocks (and their bf16 copies)
// have rows `ld` elements apart. Each call runs on the calling thread (the caller splits heads
// over threads).
// probs: P[i][j] = exp(S[i][j] * scale - lse[i]) for keys j <= row0 + i, else 0 (causal), in
// place over S; with `low` non-null also stored there in `dt` (bf16).
void attention_probs(float* S, const float* lse, void* low, int64_t rows, int64_t cols, int64_t ld, int64_t row0,
                     float scale, DType dt);
// di[i] = sum_d dO[i][d] * O[i][d] (`dt` storage; rows of D values, `ld_dO` and `ld_O` apart).
void attention_rowdot(const void* dO, const void* O, float* di, int64_t rows, int64_t D, int64_t ld_dO, int64_t ld_O,
                      DType dt);
// dS = P * (dP - di[i]) * scale, in place over dP; with `low` non-null also stored there in `dt`.
void attention_dscores(const float* P, float* dP, const float* di, void* low, int64_t rows, int64_t cols, int64_t ld,
                       float scale, DType dt);

// ---- fp32 causal attention of whole heads, forward and backward (issue 32) ----
// The heads of a [B, H, T, D] fp32 tensor with any strides over b, h, t and unit stride over d:
// element (b, h, t, d) at data[b * sb + h * sh + t * st + d].
template <class F>
struct HeadsOf {
  F* data;
  int64_t sb, sh, st;
  F* head(int64_t b, int64_t h) const { return data + b * sb + h * sh; }
};
using Heads = HeadsOf<const float>;
using HeadsOut = HeadsOf<float>;

// Whether the fp32 attention below can run: its matmuls call the Fortran sgemm of the BLAS
// LibTorch carries (MKL in the x86-64 wheels), looked up when the program loads.
bool attention_f32_available();
// Rows of queries per block: row block r sees keys 0 .. its last row only, so the causal upper
// blocks are skipped (docs/performance.md, "fp32 attention").
constexpr int64_t kAttentionRowBlock = 64;
// o = softmax(q kᵀ scale, causal) v, one head per task on ATen's threads; lse [B, H, T]
// (contiguous) gets each row's log-sum-exp of the scaled scores (what the backward needs).
void attention_forward_f32(Heads q, Heads k, Heads v, HeadsOut o, float* lse, int64_t B, int64_t H, int64_t T,
                           int64_t D, float scale);
// dq, dk, dv (overwritten) from the upstream gradient dO, the forward's o and lse: P recomputed
// per row block, dS = P (dO vᵀ - rowsum(dO o)) scale, dq = dS k, dk = dSᵀ q, dv = Pᵀ dO.
void attention_backward_f32(Heads q, Heads k, Heads v, Heads o, Heads dO, const float* lse, HeadsOut dq, HeadsOut dk,
                            HeadsOut dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale);

}  // namespace lm::kernels::cpu
