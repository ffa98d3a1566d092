// CUDA kernels of model/kernels/fused_kernels.h. Elementwise, grid-stride, fp32 arithmetic on
// fp32/bf16/fp16 storage; the math is model/kernels/fused_math.h's, which the CPU tests check.
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

template <class F>
int dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(static_cast<float*>(nullptr)); break;
    case DType::kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    case DType::kFloat16: f(static_cast<__half*>(nullptr)); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

const char* error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

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

}  // namespace lm::kernels
