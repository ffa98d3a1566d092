#include "model/fused_ops.h"

#ifdef LM_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/kernels/fused_kernels.h"
#endif

namespace lm::model {

#ifdef LM_HAVE_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

kernels::DType kernel_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return kernels::DType::kFloat32;
    case torch::kBFloat16: return kernels::DType::kBFloat16;
    case torch::kFloat16: return kernels::DType::kFloat16;
    default: TORCH_CHECK(false, "lmforge CUDA kernels: dtype ", t.scalar_type(), " not supported (fp32, bf16, fp16)");
  }
}

void check(int err, const char* what) {
  TORCH_CHECK(err == 0, "lmforge CUDA kernel ", what, " failed to launch: ", kernels::error_string(err));
}

void* stream_of(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    TORCH_CHECK(gate.is_cuda() && up.device() == gate.device(), "fused_swiglu: CUDA tensors on one device");
    TORCH_CHECK(gate.sizes() == up.sizes(), "fused_swiglu: gate ", gate.sizes(), " and up ", up.sizes(), " differ");
    const c10::cuda::CUDAGuard guard(gate.device());
    auto a = gate.contiguous();
    auto b = up.to(a.scalar_type()).contiguous();
    auto y = torch::empty_like(a);
    check(kernels::swiglu_forward(a.data_ptr(), b.data_ptr(), y.data_ptr(), a.numel(), kernel_dtype(a), stream_of(a)),
          "swiglu_forward");
    ctx->save_for_backward({a, b});
    ctx->saved_data["up_dtype"] = static_cast<int64_t>(up.scalar_type());
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& a = saved[0];
    const auto& b = saved[1];
    const c10::cuda::CUDAGuard guard(a.device());
    if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor()};
    auto g = grads[0].to(a.scalar_type()).contiguous();
    auto da = torch::empty_like(a), db = torch::empty_like(b);
    check(kernels::swiglu_backward(a.data_ptr(), b.data_ptr(), g.data_ptr(), da.data_ptr(), db.data_ptr(), a.numel(),
                                   kernel_dtype(a), stream_of(a)),
          "swiglu_backward");
    const auto up_dtype = static_cast<c10::ScalarType>(ctx->saved_data["up_dtype"].toInt());
    return {da, db.to(up_dtype)};
  }
};

// Rotates q and k (contiguous [B, T, H, D]) by the tables; `inverse` for the backward pass.
std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                                             const torch::Tensor& sin, bool inverse) {
  const c10::cuda::CUDAGuard guard(q.device());
  auto yq = torch::empty_like(q), yk = torch::empty_like(k);
  check(kernels::rope_forward(q.data_ptr(), k.data_ptr(), yq.data_ptr(), yk.data_ptr(), cos.data_ptr<float>(),
                              sin.data_ptr<float>(), q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), inverse,
                              kernel_dtype(q), stream_of(q)),
        "rope_forward");
  return {yq, yk};
}

struct RopeFn : torch::autograd::Function<RopeFn> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& cos, const torch::Tensor& sin) {
    TORCH_CHECK(q.is_cuda() && k.device() == q.device(), "fused_rope: CUDA tensors on one device");
    TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
                    q.size(3) == k.size(3) && q.size(3) % 2 == 0,
                "fused_rope: q ", q.sizes(), " and k ", k.sizes(), " must be [B, T, H, D] with one B, T and even D");
    TORCH_CHECK(cos.sizes() == sin.sizes() && cos.dim() == 2 && cos.size(0) >= q.size(1) && cos.size(1) == q.size(3),
                "fused_rope: tables ", cos.sizes(), " do not cover T = ", q.size(1), ", D = ", q.size(3));
    auto c = cos.narrow(0, 0, q.size(1)).to(q.device(), torch::kFloat32).contiguous();
    auto s = sin.narrow(0, 0, q.size(1)).to(q.device(), torch::kFloat32).contiguous();
    auto kk = k.to(q.scalar_type()).contiguous();
    auto [yq, yk] = rope(q.contiguous(), kk, c, s, /*inverse=*/false);
    ctx->save_for_backward({c, s});
    ctx->saved_data["k_dtype"] = static_cast<int64_t>(k.scalar_type());
    ctx->saved_data["q_dtype"] = static_cast<int64_t>(q.scalar_type());
    ctx->saved_data["q_shape"] = q.sizes();
    ctx->saved_data["k_shape"] = k.sizes();
    return {yq, yk};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    // An output that reached no loss has no gradient: zeros of its shape stand in.
    const auto q_shape = ctx->saved_data["q_shape"].toIntVector(), k_shape = ctx->saved_data["k_shape"].toIntVector();
    const auto dt = static_cast<c10::ScalarType>(ctx->saved_data["q_dtype"].toInt());
    const auto dev = saved[0].device();
    auto gq = grads[0].defined() ? grads[0].to(dt).contiguous() : torch::zeros(q_shape, torch::dtype(dt).device(dev));
    auto gk = grads[1].defined() ? grads[1].to(dt).contiguous() : torch::zeros(k_shape, torch::dtype(dt).device(dev));
    auto [dq, dk] = rope(gq, gk, saved[0], saved[1], /*inverse=*/true);
    const auto k_dtype = static_cast<c10::ScalarType>(ctx->saved_data["k_dtype"].toInt());
    return {dq, dk.to(k_dtype), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool cuda_kernels_compiled() { return true; }

torch::Tensor fused_swiglu(const torch::Tensor& gate, const torch::Tensor& up) { return SwigluFn::apply(gate, up); }

std::pair<torch::Tensor, torch::Tensor> fused_rope(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& cos, const torch::Tensor& sin) {
  auto out = RopeFn::apply(q, k, cos, sin);
  return {out[0], out[1]};
}

#else  // no CUDA kernels in this build

bool cuda_kernels_compiled() { return false; }

torch::Tensor fused_swiglu(const torch::Tensor&, const torch::Tensor&) {
  TORCH_CHECK(false, "fused_swiglu: this build has no CUDA kernels (LibTorch without CUDA, or no nvcc at build time)");
}

std::pair<torch::Tensor, torch::Tensor> fused_rope(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                   const torch::Tensor&) {
  TORCH_CHECK(false, "fused_rope: this build has no CUDA kernels (LibTorch without CUDA, or no nvcc at build time)");
}

#endif

}  // namespace lm::model
