// CUDA kernels of model/kernels/fused_kernels.h. Elementwise ones grid-stride, row ones a block per
// row; fp32 arithmetic on fp32/bf16/fp16 storage; the math is model/kernels/fused_math.h's,
// which the CPU tests check.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "model/kernels/fused_kernels.h"
#include "model/kernels/fused_math.h"

namespace lm::kernels {
namespace {

template <class T>
__device__ __forceinline__ float load(const T* p, int64_t i);
template <>
__device__ __forceinline__ float load<float>(const float* p, int64_t i) { return p[i]; }
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <>
__device__ __forceinline__ float load<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }

template <class T>
__device__ __forceinline__ void store(T* p, int64_t i, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, int64_t i, float v) { p[i] = v; }
template <>
__device__ __forceinline__ void store<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ void store<__half>(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

constexpr int kThreads = 256;

// Enough blocks to cover n with one element per thread, capped; the loops stride over the rest.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

template <class T>
__global__ void swiglu_fwd_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(y, i, swiglu(load(a, i), load(b, i)));
}

template <class T>
__global__ void swiglu_bwd_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ g,
                                  T* __restrict__ da, T* __restrict__ db, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float ga, gb;
    swiglu_grad(load(a, i), load(b, i), load(g, i), &ga, &gb);
    store(da, i, ga);
    store(db, i, gb);
  }
}

// Pairs of q first (nq of them), then of k; one thread per pair.
template <class T>
__global__ void rope_kernel(const T* __restrict__ q, const T* __restrict__ k, T* __restrict__ yq,
                            T* __restrict__ yk, const float* __restrict__ cos, const float* __restrict__ sin,
                            int64_t T_, int64_t Hq, int64_t Hk, int64_t D, int64_t nq, int64_t n, float sign) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_q = p < nq;
    const RopeIndex r = is_q ? rope_index(p, T_, Hq, D) : rope_index(p - nq, T_, Hk, D);
    const T* x = is_q ? q : k;
    T* y = is_q ? yq : yk;
    const float c = cos[r.t * D + r.i], s = sign * sin[r.t * D + r.i];
    float y1, y2;
    rope_pair(load(x, r.offset), load(x, r.offset + D / 2), c, s, &y1, &y2);
    store(y, r.offset, y1);
    store(y, r.offset + D / 2, y2);
  }
}


// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread; `red` is 32 floats of shared memory, free again when this returns.
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  const float total = red[0];
  __syncthreads();
  return total;
}

// One block per row (the grid strides over rows); each thread owns columns j = tid + k * blockDim.
template <class TR, class TC>
__global__ void add_rms_norm_fwd_kernel(const TR* __restrict__ x, const TC* __restrict__ r, const float* __restrict__ w,
                                        TR* s, TC* __restrict__ y, float* __restrict__ rstd, int64_t rows, int64_t C,
                                        float eps) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * C;
    float sum_sq = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      store(s, base + j, load(x, base + j) + load(r, base + j));
      const float v = load(s, base + j);  // the rounded residual, as the reference normalises it
      sum_sq += v * v;
    }
    const float rs = rms_rstd(block_sum(sum_sq, red), C, eps);
    if (threadIdx.x == 0) rstd[row] = rs;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) store(y, base + j, rms_norm_out(load(s, base + j), rs, w[j]));
  }
}

// Rows blockIdx.x, +gridDim.x, ...; the block's share of dw stays in shared memory (C floats,
// each thread only its own columns, so no synchronisation) and is written once as a partial row.
template <class TR, class TC>
__global__ void add_rms_norm_bwd_kernel(const TC* __restrict__ dy, const TR* __restrict__ ds_in, const TR* __restrict__ s,
                                        const float* __restrict__ w, const float* __restrict__ rstd, TR* __restrict__ ds,
                                        float* __restrict__ dw_partial, int64_t rows, int64_t C) {
  extern __shared__ float dw_acc[];
  __shared__ float red[32];
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dw_acc[j] = 0.0f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * C;
    const float rs = rstd[row];
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dot += load(dy, base + j) * w[j] * (load(s, base + j) * rs);
    const float mean_gn = block_sum(dot, red) / static_cast<float>(C);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const float g = load(dy, base + j), n = load(s, base + j) * rs;
      store(ds, base + j, rms_norm_grad(g, w[j], n, rs, mean_gn, ds_in ? load(ds_in, base + j) : 0.0f));
      dw_acc[j] += g * n;
    }
  }
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dw_partial[blockIdx.x * C + j] = dw_acc[j];
}

// Calls f with a null pointer of the storage type `dt` names.
template <class F>
void visit(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(static_cast<float*>(nullptr)); break;
    case DType::kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    case DType::kFloat16: f(static_cast<__half*>(nullptr)); break;
  }
}

// The error an earlier asynchronous operation left pending, read (a non-sticky one is cleared by
// the read) before a launch, negated: cudaGetLastError() after the launch alone would blame it on
// this kernel (fused_kernels.h).
int pending_error() {
  const cudaError_t before = cudaGetLastError();
  return before == cudaSuccess ? 0 : -static_cast<int>(before);
}

// Launches through f for `dt` and returns the launch's error (negative: one pending before it).
template <class F>
int dispatch(DType dt, F&& f) {
  if (const int pending = pending_error()) return pending;
  visit(dt, f);
  return static_cast<int>(cudaGetLastError());
}

// The same for two storage types: the residual stream's and the compute dtype's.
template <class F>
int dispatch2(DType residual, DType compute, F&& f) {
  if (const int pending = pending_error()) return pending;
  visit(residual, [&](auto* tr) { visit(compute, [&](auto* tc) { f(tr, tc); }); });
  return static_cast<int>(cudaGetLastError());
}

constexpr int kRowThreads = 256;

}  // namespace

const char* error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err < 0 ? -err : err)); }

int swiglu_forward(const void* a, const void* b, void* y, int64_t n, DType dt, void* stream) {
  if (n == 0) return 0;
  return dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    swiglu_fwd_kernel<T><<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
  });
}

int swiglu_backward(const void* a, const void* b, const void* g, void* da, void* db, int64_t n, DType dt,
                    void* stream) {
  if (n == 0) return 0;
  return dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    swiglu_bwd_kernel<T><<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(g), static_cast<T*>(da),
        static_cast<T*>(db), n);
  });
}

int rope_forward(const void* q, const void* k, void* yq, void* yk, const float* cos, const float* sin, int64_t B,
                 int64_t T, int64_t Hq, int64_t Hk, int64_t D, bool inverse, DType dt, void* stream) {
  const int64_t nq = B * T * Hq * (D / 2), n = nq + B * T * Hk * (D / 2);
  if (n == 0) return 0;
  return dispatch(dt, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    rope_kernel<E><<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const E*>(q), static_cast<const E*>(k), static_cast<E*>(yq), static_cast<E*>(yk), cos, sin, T,
        Hq, Hk, D, nq, n, inverse ? -1.0f : 1.0f);
  });
}

int add_rms_norm_forward(const void* x, const void* r, const float* w, void* s, void* y, float* rstd, int64_t rows,
                         int64_t C, float eps, DType residual, DType compute, void* stream) {
  if (rows == 0 || C == 0) return 0;
  if (C > kAddRmsNormMaxCols) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned grid = static_cast<unsigned>(rows < (int64_t{1} << 30) ? rows : (int64_t{1} << 30));
  return dispatch2(residual, compute, [&](auto* tr, auto* tc) {
    using TR = std::remove_pointer_t<decltype(tr)>;
    using TC = std::remove_pointer_t<decltype(tc)>;
    add_rms_norm_fwd_kernel<TR, TC><<<grid, kRowThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const TR*>(x), static_cast<const TC*>(r), w, static_cast<TR*>(s), static_cast<TC*>(y), rstd, rows,
        C, eps);
  });
}

int add_rms_norm_backward(const void* dy, const void* ds_in, const void* s, const float* w, const float* rstd,
                          void* ds, float* dw_partial, int64_t rows, int64_t C, int64_t blocks, DType residual,
                          DType compute, void* stream) {
  if (rows == 0 || C == 0) return 0;
  if (C > kAddRmsNormMaxCols || blocks < 1 || blocks > rows) return static_cast<int>(cudaErrorInvalidValue);
  const size_t shared = static_cast<size_t>(C) * sizeof(float);
  return dispatch2(residual, compute, [&](auto* tr, auto* tc) {
    using TR = std::remove_pointer_t<decltype(tr)>;
    using TC = std::remove_pointer_t<decltype(tc)>;
    add_rms_norm_bwd_kernel<TR, TC><<<static_cast<unsigned>(blocks), kRowThreads, shared,
                                      static_cast<cudaStream_t>(stream)>>>(
        static_cast<const TC*>(dy), static_cast<const TR*>(ds_in), static_cast<const TR*>(s), w, rstd,
        static_cast<TR*>(ds), dw_partial, rows, C);
  });
}

}  // namespace lm::kernels
