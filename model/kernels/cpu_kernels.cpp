// CPU kernels of model/kernels/cpu_kernels.h. Compiled apart from the rest of lm_model: with
// -fopenmp (at::parallel_for is a header template that only splits work when _OPENMP is defined;
// the OpenMP runtime is the one LibTorch already loads) and without the torch precompiled header.
//
// Vectorisation without intrinsics: every hot loop is a plain fp32 loop over contiguous
// storage (bf16 loaded and stored by bit shifts, round to nearest even as c10::BFloat16 does),
// which GCC vectorises at -O3; `omp simd` lets it vectorise the row reductions too. The entry
// points that run those loops are cloned per ISA (target_clones: AVX-512, AVX2+FMA, baseline)
// and the loader's ifunc picks the clone once, so one binary runs on any x86-64 CPU at its width.
#include "model/kernels/cpu_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// The Fortran sgemm of the BLAS inside LibTorch (MKL in the x86-64 wheels; ATen calls it too).
// Weak: a LibTorch without it leaves this null, and the fp32 attention is not used.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) __attribute__((weak));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LM_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define LM_CLONES
#endif
#define LM_INLINE inline __attribute__((always_inline))

namespace lm::kernels::cpu {
namespace {

using bf16 = uint16_t;  // bf16 bits

LM_INLINE float ld(float v) { return v; }
LM_INLINE float ld(bf16 v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <class T>
LM_INLINE T st(float f);
template <>
LM_INLINE float st<float>(float f) { return f; }
template <>
LM_INLINE bf16 st<bf16>(float f) {  // round to nearest even; NaN stays NaN (c10::BFloat16's rule)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return f != f ? bf16{0x7FC0} : static_cast<bf16>(r);
}

// e^x in fp32 without libm, so loops over it vectorise: x = n ln2 + r, |r| <= ln2/2, e^r by
// Cephes' expf polynomial, 2^n by the exponent bits (max relative error 8e-8 on [-87, 88]).
// NaN stays NaN (the comparisons below keep it), so a NaN loss still reaches the sentinel.
LM_INLINE float exp_f(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  int32_t ti;
  std::memcpy(&ti, &t, 4);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (ti - 0x4B400000 + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}

// ---- SwiGLU (fused_math.h's swiglu, swiglu_grad) ----
template <class T>
LM_INLINE void swiglu_fwd_loop(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float av = ld(a[i]);
    y[i] = st<T>(av / (1.0f + exp_f(-av)) * ld(b[i]));
  }
}
template <class T>
LM_INLINE void swiglu_bwd_loop(const T* a, const T* b, const T* g, T* da, T* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float av = ld(a[i]), gv = ld(g[i]);
    const float s = 1.0f / (1.0f + exp_f(-av));
    da[i] = st<T>(gv * ld(b[i]) * s * (1.0f + av * (1.0f - s)));
    db[i] = st<T>(gv * av * s);
  }
}

LM_CLONES void swiglu_fwd_range(const void* a, const void* b, void* y, int64_t lo, int64_t hi, DType dt) {
  if (dt == DType::kBFloat16)
    swiglu_fwd_loop(static_cast<const bf16*>(a) + lo, static_cast<const bf16*>(b) + lo, static_cast<bf16*>(y) + lo, hi - lo);
  else
    swiglu_fwd_loop(static_cast<const float*>(a) + lo, static_cast<const float*>(b) + lo, static_cast<float*>(y) + lo,
                    hi - lo);
}

LM_CLONES void swiglu_bwd_range(const void* a, const void* b, const void* g, void* da, void* db, int64_t lo,
                                int64_t hi, DType dt) {
  if (dt == DType::kBFloat16)
    swiglu_bwd_loop(static_cast<const bf16*>(a) + lo, static_cast<const bf16*>(b) + lo, static_cast<const bf16*>(g) + lo,
                    static_cast<bf16*>(da) + lo, static_cast<bf16*>(db) + lo, hi - lo);
  else
    swiglu_bwd_loop(static_cast<const float*>(a) + lo, static_cast<const float*>(b) + lo,
                    static_cast<const float*>(g) + lo, static_cast<float*>(da) + lo, static_cast<float*>(db) + lo,
                    hi - lo);
}

// ---- Rotary embedding (fused_math.h's rope_pair), rows (b, t) of H heads ----
template <class T>
LM_INLINE void rope_rows(const T* x, T* y, const float* cos, const float* sin, int64_t T_, int64_t H, int64_t D,
                         float sign, int64_t lo, int64_t hi) {
  const int64_t half = D / 2;
  for (int64_t row = lo; row < hi; ++row) {
    const float* c = cos + (row % T_) * D;
    const float* s = sin + (row % T_) * D;
    for (int64_t h = 0; h < H; ++h) {
      const T* xr = x + (row * H + h) * D;
      T* yr = y + (row * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = ld(xr[i]), x2 = ld(xr[i + half]), si = sign * s[i];
        yr[i] = st<T>(x1 * c[i] - x2 * si);
        yr[i + half] = st<T>(x2 * c[i] + x1 * si);
      }
    }
  }
}

LM_CLONES void rope_range(const void* x, void* y, const float* cos, const float* sin, int64_t T_, int64_t H, int64_t D,
                          float sign, int64_t lo, int64_t hi, DType dt) {
  if (dt == DType::kBFloat16)
    rope_rows(static_cast<const bf16*>(x), static_cast<bf16*>(y), cos, sin, T_, H, D, sign, lo, hi);
  else
    rope_rows(static_cast<const float*>(x), static_cast<float*>(y), cos, sin, T_, H, D, sign, lo, hi);
}

// ---- Residual add + RMSNorm (fused_math.h's rms_rstd, rms_norm_out, rms_norm_grad) ----
template <class X, class Y>
LM_INLINE void add_norm_rows(const X* x, const Y* r, const float* w, X* s, Y* y, float* rstd, int64_t C, float eps,
                             int64_t lo, int64_t hi) {
  for (int64_t row = lo; row < hi; ++row) {
    const X* xr = x + row * C;
    const X* sr = xr;  // with no residual add, the row is normalised as it is
    float ss = 0.0f;
    if (r != nullptr) {
      const Y* rr = r + row * C;
      X* so = s + row * C;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < C; ++j) {
        const X v = st<X>(ld(xr[j]) + ld(rr[j]));  // the stored (rounded) sum is what gets normalised
        so[j] = v;
        ss += ld(v) * ld(v);
      }
      sr = so;
    } else {
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < C; ++j) ss += ld(xr[j]) * ld(xr[j]);
    }
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    rstd[row] = rs;
    Y* yr = y + row * C;
    for (int64_t j = 0; j < C; ++j) yr[j] = st<Y>(ld(sr[j]) * rs * w[j]);
  }
}

template <class X, class Y>
LM_INLINE void add_norm_bwd_rows(const Y* dy, const X* ds_in, const X* s, const float* w, const float* rstd, X* ds,
                                 float* dw, int64_t C, int64_t lo, int64_t hi) {
  for (int64_t row = lo; row < hi; ++row) {
    const Y* g = dy + row * C;
    const X* sr = s + row * C;
    const float rs = rstd[row];
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < C; ++j) dot += ld(g[j]) * w[j] * (ld(sr[j]) * rs);
    const float mean = dot / static_cast<float>(C);
    X* d = ds + row * C;
    if (ds_in != nullptr) {
      const X* di = ds_in + row * C;
      for (int64_t j = 0; j < C; ++j) {
        const float n = ld(sr[j]) * rs, gv = ld(g[j]);
        d[j] = st<X>(rs * (gv * w[j] - n * mean) + ld(di[j]));
        dw[j] += gv * n;
      }
    } else {
      for (int64_t j = 0; j < C; ++j) {
        const float n = ld(sr[j]) * rs, gv = ld(g[j]);
        d[j] = st<X>(rs * (gv * w[j] - n * mean));
        dw[j] += gv * n;
      }
    }
  }
}

template <class X, class Y>
LM_INLINE void add_norm_typed(const void* x, const void* r, const float* w, void* s, void* y, float* rstd, int64_t C,
                              float eps, int64_t lo, int64_t hi) {
  add_norm_rows(static_cast<const X*>(x), static_cast<const Y*>(r), w, static_cast<X*>(s), static_cast<Y*>(y), rstd, C,
                eps, lo, hi);
}
template <class X, class Y>
LM_INLINE void add_norm_bwd_typed(const void* dy, const void* ds_in, const void* s, const float* w, const float* rstd,
                                  void* ds, float* dw, int64_t C, int64_t lo, int64_t hi) {
  add_norm_bwd_rows(static_cast<const Y*>(dy), static_cast<const X*>(ds_in), static_cast<const X*>(s), w, rstd,
                    static_cast<X*>(ds), dw, C, lo, hi);
}

// The (residual, compute) storage pairs, dispatched inside the cloned functions (no lambdas:
// a call that is not inlined would run at the baseline ISA).
LM_CLONES void add_norm_range(const void* x, const void* r, const float* w, void* s, void* y, float* rstd, int64_t C,
                              float eps, int64_t lo, int64_t hi, DType residual, DType compute) {
  const bool xf = residual == DType::kFloat32, yf = compute == DType::kFloat32;
  if (xf && yf) add_norm_typed<float, float>(x, r, w, s, y, rstd, C, eps, lo, hi);
  else if (xf) add_norm_typed<float, bf16>(x, r, w, s, y, rstd, C, eps, lo, hi);
  else if (yf) add_norm_typed<bf16, float>(x, r, w, s, y, rstd, C, eps, lo, hi);
  else add_norm_typed<bf16, bf16>(x, r, w, s, y, rstd, C, eps, lo, hi);
}

LM_CLONES void add_norm_bwd_range(const void* dy, const void* ds_in, const void* s, const float* w, const float* rstd,
                                  void* ds, float* dw, int64_t C, int64_t lo, int64_t hi, DType residual,
                                  DType compute) {
  const bool xf = residual == DType::kFloat32, yf = compute == DType::kFloat32;
  if (xf && yf) add_norm_bwd_typed<float, float>(dy, ds_in, s, w, rstd, ds, dw, C, lo, hi);
  else if (xf) add_norm_bwd_typed<float, bf16>(dy, ds_in, s, w, rstd, ds, dw, C, lo, hi);
  else if (yf) add_norm_bwd_typed<bf16, float>(dy, ds_in, s, w, rstd, ds, dw, C, lo, hi);
  else add_norm_bwd_typed<bf16, bf16>(dy, ds_in, s, w, rstd, ds, dw, C, lo, hi);
}

// ---- Softmax cross-entropy of logit rows ----
template <class T>
LM_INLINE void xent_rows(T* logits, const int64_t* targets, int64_t V, float grad_scale, float* e, double* loss,
                         int64_t lo, int64_t hi) {
  for (int64_t row = lo; row < hi; ++row) {
    T* x = logits + row * V;
    const int64_t t = targets[row];
    const float xt = ld(x[t]);
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < V; ++j) {
      e[j] = ld(x[j]);
      m = e[j] > m ? e[j] : m;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) {
      e[j] = exp_f(e[j] - m);
      sum += e[j];
    }
    loss[row] = static_cast<double>(m) + std::log(static_cast<double>(sum)) - static_cast<double>(xt);
    if (grad_scale == 0.0f) continue;
    const float k = grad_scale / sum;
    for (int64_t j = 0; j < V; ++j) x[j] = st<T>(e[j] * k);
    x[t] = st<T>(e[t] * k - grad_scale);
  }
}

LM_CLONES void xent_range(void* logits, const int64_t* targets, int64_t V, float grad_scale, float* e, double* loss,
                          int64_t lo, int64_t hi, DType dt) {
  if (dt == DType::kBFloat16)
    xent_rows(static_cast<bf16*>(logits), targets, V, grad_scale, e, loss, lo, hi);
  else
    xent_rows(static_cast<float*>(logits), targets, V, grad_scale, e, loss, lo, hi);
}

// ---- One attention head's backward: probabilities, row dots, score gradients ----
template <class T>
LM_INLINE void attn_probs_rows(float* S, const float* lse, T* low, int64_t rows, int64_t cols, int64_t ld,
                               int64_t row0, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* s = S + i * ld;
    const int64_t n = std::min(cols, row0 + i + 1);  // keys this row sees
    const float l = lse[i];
    for (int64_t j = 0; j < n; ++j) s[j] = exp_f(s[j] * scale - l);
    for (int64_t j = n; j < cols; ++j) s[j] = 0.0f;
    if (low != nullptr) {
      T* o = low + i * ld;
      for (int64_t j = 0; j < cols; ++j) o[j] = st<T>(s[j]);
    }
  }
}

template <class T>
LM_INLINE void attn_rowdot_rows(const T* dO, const T* O, float* di, int64_t rows, int64_t D, int64_t ld_dO,
                                int64_t ld_O) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* g = dO + i * ld_dO;
    const T* o = O + i * ld_O;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t d = 0; d < D; ++d) acc += ld(g[d]) * ld(o[d]);
    di[i] = acc;
  }
}

template <class T>
LM_INLINE void attn_dscores_rows(const float* P, float* dP, const float* di, T* low, int64_t rows, int64_t cols,
                                 int64_t ld, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* p = P + i * ld;
    float* d = dP + i * ld;
    const float m = di[i];
    for (int64_t j = 0; j < cols; ++j) d[j] = p[j] * (d[j] - m) * scale;
    if (low != nullptr) {
      T* o = low + i * ld;
      for (int64_t j = 0; j < cols; ++j) o[j] = st<T>(d[j]);
    }
  }
}

// Work per thread worth a fork: ~32k elements (a few tens of microseconds).
constexpr int64_t kGrainElems = 1 << 15;
int64_t row_grain(int64_t width) { return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, width)); }

}  // namespace

LM_CLONES void attention_probs(float* S, const float* lse, void* low, int64_t rows, int64_t cols, int64_t ld,
                               int64_t row0, float scale, DType dt) {
  if (dt == DType::kBFloat16) attn_probs_rows(S, lse, static_cast<bf16*>(low), rows, cols, ld, row0, scale);
  else attn_probs_rows<float>(S, lse, nullptr, rows, cols, ld, row0, scale);
}

LM_CLONES void attention_rowdot(const void* dO, const void* O, float* di, int64_t rows, int64_t D, int64_t ld_dO,
                                int64_t ld_O, DType dt) {
  if (dt == DType::kBFloat16)
    attn_rowdot_rows(static_cast<const bf16*>(dO), static_cast<const bf16*>(O), di, rows, D, ld_dO, ld_O);
  else
    attn_rowdot_rows(static_cast<const float*>(dO), static_cast<const float*>(O), di, rows, D, ld_dO, ld_O);
}

LM_CLONES void attention_dscores(const float* P, float* dP, const float* di, void* low, int64_t rows, int64_t cols,
                                 int64_t ld, float scale, DType dt) {
  if (dt == DType::kBFloat16) attn_dscores_rows(P, dP, di, static_cast<bf16*>(low), rows, cols, ld, scale);
  else attn_dscores_rows<float>(P, dP, di, nullptr, rows, cols, ld, scale);
}

// ---- fp32 causal attention of whole heads ----
namespace {

// Per row: P = softmax(S scale) over keys j <= row0 + i (0 beyond, up to cols), in place over S;
// lse[i] = the scaled row's log-sum-exp. NaN in a row reaches its P (exp_f keeps it).
LM_CLONES void attention_softmax(float* S, float* lse, int64_t rows, int64_t cols, int64_t ld, int64_t row0,
                                 float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* s = S + i * ld;
    const int64_t n = std::min(cols, row0 + i + 1);
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    mx *= scale;  // scale > 0
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      const float e = exp_f(s[j] * scale - mx);
      s[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
    for (int64_t j = n; j < cols; ++j) s[j] = 0.0f;
    lse[i] = mx + std::log(sum);
  }
}

// Row-major C [M, N] = op(A) op(B) + beta C, where op(A) is A [M, K] (`lda` apart) or, with
// `ta`, the transpose of A stored [K, M]; op(B) is B [K, N] or, with `tb`, Bᵀ of B stored
// [N, K]. Fortran BLAS is column-major, and a row-major C is a column-major Cᵀ = op(B)ᵀ op(A)ᵀ.
void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
             int64_t ldb, float beta, float* C, int64_t ldc) {
  const char tra = tb ? 'T' : 'N', trb = ta ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  const float one = 1.0f;
  sgemm_(&tra, &trb, &m, &n, &k, &one, B, &la, A, &lb, &beta, C, &lc);
}

// One head's forward, row block by row block: S = q_r k[0..r1)ᵀ, P = softmax in place, o_r = P v[0..r1).
// S: kAttentionRowBlock * T floats of the calling thread's.
void attention_head_forward(const float* q, const float* k, const float* v, float* o, float* lse, int64_t ldq,
                            int64_t ldk, int64_t ldv, int64_t ldo, int64_t T, int64_t D, float scale, float* S) {
  for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
    const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), m = r1 - r0;
    gemm_rm(false, true, m, r1, D, q + r0 * ldq, ldq, k, ldk, 0.0f, S, r1);
    attention_softmax(S, lse + r0, m, r1, r1, r0, scale);
    gemm_rm(false, false, m, D, r1, S, r1, v, ldv, 0.0f, o + r0 * ldo, ldo);
  }
}

struct HeadPtrs {
  const float *q, *k, *v, *o, *g;
  float *dq, *dk, *dv;
  int64_t ldq, ldk, ldv, ldo, ldg, lddq, lddk, lddv;
};

// One head's backward. S, dP: T * T floats, di: T, of the calling thread's. Row block r fills P and
// dS for keys 0..r1 (the blocks above the diagonal are never read) and gives dq of its rows; then
// dv and dk of key block c take the rows c0..T of P and dS.
void attention_head_backward(const HeadPtrs& p, const float* lse, int64_t T, int64_t D, float scale, float* S,
                             float* dP, float* di) {
  attention_rowdot(p.g, p.o, di, T, D, p.ldg, p.ldo, DType::kFloat32);
  for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
    const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), m = r1 - r0;
    float* s = S + r0 * T;
    float* dp = dP + r0 * T;
    gemm_rm(false, true, m, r1, D, p.q + r0 * p.ldq, p.ldq, p.k, p.ldk, 0.0f, s, T);
    attention_probs(s, lse + r0, nullptr, m, r1, T, r0, scale, DType::kFloat32);
    gemm_rm(false, true, m, r1, D, p.g + r0 * p.ldg, p.ldg, p.v, p.ldv, 0.0f, dp, T);
    attention_dscores(s, dp, di + r0, nullptr, m, r1, T, scale, DType::kFloat32);
    gemm_rm(false, false, m, D, r1, dp, T, p.k, p.ldk, 0.0f, p.dq + r0 * p.lddq, p.lddq);
  }
  for (int64_t c0 = 0; c0 < T; c0 += kAttentionRowBlock) {
    const int64_t c1 = std::min(T, c0 + kAttentionRowBlock), n = c1 - c0;
    gemm_rm(true, false, n, D, T - c0, S + c0 * T + c0, T, p.g + c0 * p.ldg, p.ldg, 0.0f, p.dv + c0 * p.lddv,
            p.lddv);
    gemm_rm(true, false, n, D, T - c0, dP + c0 * T + c0, T, p.q + c0 * p.ldq, p.ldq, 0.0f, p.dk + c0 * p.lddk,
            p.lddk);
  }
}

}  // namespace

bool attention_f32_available() { return sgemm_ != nullptr; }

void attention_forward_f32(Heads q, Heads k, Heads v, HeadsOut o, float* lse, int64_t B, int64_t H, int64_t T,
                           int64_t D, float scale) {
  at::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> S(static_cast<size_t>(kAttentionRowBlock * T));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t b = u / H, h = u % H;
      attention_head_forward(q.head(b, h), k.head(b, h), v.head(b, h), o.head(b, h), lse + u * T, q.st, k.st, v.st,
                             o.st, T, D, scale, S.data());
    }
  });
}

void attention_backward_f32(Heads q, Heads k, Heads v, Heads o, Heads dO, const float* lse, HeadsOut dq, HeadsOut dk,
                            HeadsOut dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale) {
  at::parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> S(static_cast<size_t>(T * T)), dP(static_cast<size_t>(T * T)), di(static_cast<size_t>(T));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t b = u / H, h = u % H;
      const HeadPtrs p{q.head(b, h), k.head(b, h), v.head(b, h), o.head(b, h), dO.head(b, h),
                       dq.head(b, h), dk.head(b, h), dv.head(b, h), q.st, k.st, v.st, o.st, dO.st,
                       dq.st, dk.st, dv.st};
      attention_head_backward(p, lse + u * T, T, D, scale, S.data(), dP.data(), di.data());
    }
  });
}

void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(0, n, grain, fn);
}

bool takes(DType dt) { return dt == DType::kFloat32 || dt == DType::kBFloat16; }

void swiglu_forward(const void* a, const void* b, void* y, int64_t n, DType dt) {
  at::parallel_for(0, n, kGrainElems, [&](int64_t lo, int64_t hi) { swiglu_fwd_range(a, b, y, lo, hi, dt); });
}

void swiglu_backward(const void* a, const void* b, const void* g, void* da, void* db, int64_t n, DType dt) {
  at::parallel_for(0, n, kGrainElems, [&](int64_t lo, int64_t hi) { swiglu_bwd_range(a, b, g, da, db, lo, hi, dt); });
}

void rope(const void* q, const void* k, void* yq, void* yk, const float* cos, const float* sin, int64_t B, int64_t T,
          int64_t Hq, int64_t Hk, int64_t D, bool inverse, DType dt) {
  const float sign = inverse ? -1.0f : 1.0f;
  const int64_t rows = B * T;  // q's rows first, then k's
  at::parallel_for(0, 2 * rows, row_grain((Hq + Hk) * D / 2), [&](int64_t lo, int64_t hi) {
    if (lo < rows) rope_range(q, yq, cos, sin, T, Hq, D, sign, lo, std::min(hi, rows), dt);
    if (hi > rows) rope_range(k, yk, cos, sin, T, Hk, D, sign, std::max(lo, rows) - rows, hi - rows, dt);
  });
}

void add_rms_norm_forward(const void* x, const void* r, const float* w, void* s, void* y, float* rstd, int64_t rows,
                          int64_t C, float eps, DType residual, DType compute) {
  at::parallel_for(0, rows, row_grain(C), [&](int64_t lo, int64_t hi) {
    add_norm_range(x, r, w, s, y, rstd, C, eps, lo, hi, residual, compute);
  });
}

void add_rms_norm_backward(const void* dy, const void* ds_in, const void* s, const float* w, const float* rstd,
                           void* ds, float* dw, int64_t rows, int64_t C, DType residual, DType compute) {
  // dw's partial sums per fixed block of rows, then added in block order: deterministic for any
  // thread count (a resume on another machine, or with other threads, sums the same way).
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<float> partial(static_cast<size_t>(blocks * C), 0.0f);
  at::parallel_for(0, blocks, std::max<int64_t>(1, row_grain(C) / kBlockRows), [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      add_norm_bwd_range(dy, ds_in, s, w, rstd, ds, partial.data() + b * C, C, b * kBlockRows,
                         std::min(rows, (b + 1) * kBlockRows), residual, compute);
  });
  for (int64_t j = 0; j < C; ++j) dw[j] = 0.0f;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < C; ++j) dw[j] += partial[b * C + j];
}

double softmax_xent(void* logits, const int64_t* targets, int64_t n, int64_t V, float grad_scale, DType dt) {
  std::vector<double> loss(static_cast<size_t>(n));
  at::parallel_for(0, n, row_grain(V), [&](int64_t lo, int64_t hi) {
    std::vector<float> e(static_cast<size_t>(V));  // the row's exponentials, in cache between the passes
    xent_range(logits, targets, V, grad_scale, e.data(), loss.data(), lo, hi, dt);
  });
  double total = 0;
  for (double l : loss) total += l;  // in row order: the same sum for any thread count
  return total;
}

void softmax_xent_rows(const void* logits, const int64_t* targets, int64_t n, int64_t V, double* nats, DType dt) {
  at::parallel_for(0, n, row_grain(V), [&](int64_t lo, int64_t hi) {
    std::vector<float> e(static_cast<size_t>(V));
    // grad_scale 0: the rows are read, never written
    xent_range(const_cast<void*>(logits), targets, V, 0.0f, e.data(), nats, lo, hi, dt);
  });
}

}  // namespace lm::kernels::cpu
