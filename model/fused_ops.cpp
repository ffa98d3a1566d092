#include "model/fused_ops.h"

#ifdef LM_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>
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


// s = x + r and y = rms_norm(s) * w; saves s, w (fp32) and each row's rstd.
struct AddRmsNormFn : torch::autograd::Function<AddRmsNormFn> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& r,
                             const torch::Tensor& weight, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t C = x.size(-1), rows = x.numel() / C;
    auto xc = x.contiguous(), rc = r.contiguous();
    auto w = weight.to(torch::kFloat32).contiguous();
    auto s = torch::empty_like(xc), y = torch::empty_like(rc);
    auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    check(kernels::add_rms_norm_forward(xc.data_ptr(), rc.data_ptr(), w.data_ptr<float>(), s.data_ptr(), y.data_ptr(),
                                        rstd.data_ptr<float>(), rows, C, static_cast<float>(eps), kernel_dtype(xc),
                                        kernel_dtype(rc), stream_of(xc)),
          "add_rms_norm_forward");
    ctx->save_for_backward({s, w, rstd});
    ctx->saved_data["r_dtype"] = static_cast<int64_t>(r.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return {s, y};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& s = saved[0];
    const auto& w = saved[1];
    const auto& rstd = saved[2];
    const c10::cuda::CUDAGuard guard(s.device());
    const auto r_dtype = static_cast<c10::ScalarType>(ctx->saved_data["r_dtype"].toInt());
    const auto w_dtype = static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const int64_t C = s.size(-1), rows = s.numel() / C;
    auto ds_in = grads[0].defined() ? grads[0].to(s.scalar_type()).contiguous() : torch::Tensor();
    if (!grads[1].defined()) {  // only s reached a loss: the norm passes nothing back
      auto ds = ds_in.defined() ? ds_in : torch::zeros_like(s);
      return {ds, ds.to(r_dtype), torch::zeros({C}, w.options().dtype(w_dtype)), torch::Tensor()};
    }
    auto dy = grads[1].to(r_dtype).contiguous();
    const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 4 * sms));
    auto ds = torch::empty_like(s);
    auto dw_partial = torch::empty({blocks, C}, s.options().dtype(torch::kFloat32));
    check(kernels::add_rms_norm_backward(dy.data_ptr(), ds_in.defined() ? ds_in.data_ptr() : nullptr, s.data_ptr(),
                                         w.data_ptr<float>(), rstd.data_ptr<float>(), ds.data_ptr(),
                                         dw_partial.data_ptr<float>(), rows, C, blocks, kernel_dtype(s),
                                         kernel_dtype(dy), stream_of(s)),
          "add_rms_norm_backward");
    return {ds, ds.to(r_dtype), dw_partial.sum(0).to(w_dtype), torch::Tensor()};
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

bool fused_add_rms_norm_takes(const torch::Tensor& x, const torch::Tensor& r, torch::ScalarType out_dtype) {
  return x.is_cuda() && r.scalar_type() == out_dtype &&
         c10::promoteTypes(x.scalar_type(), r.scalar_type()) == x.scalar_type() && x.dim() >= 1 &&
         x.size(-1) <= kernels::kAddRmsNormMaxCols && x.numel() > 0;
}

std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& r,
                                                           const torch::Tensor& weight, double eps,
                                                           torch::ScalarType out_dtype) {
  TORCH_CHECK(x.is_cuda() && r.device() == x.device() && weight.device() == x.device(),
              "fused_add_rms_norm: CUDA tensors on one device");
  TORCH_CHECK(x.sizes() == r.sizes() && x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "fused_add_rms_norm: x ", x.sizes(), ", r ", r.sizes(), " and weight ", weight.sizes(), " do not match");
  TORCH_CHECK(fused_add_rms_norm_takes(x, r, out_dtype), "fused_add_rms_norm: x ", x.scalar_type(), ", r ",
              r.scalar_type(), " to ", out_dtype, " with ", x.size(-1), " columns is not a case the kernel takes");
  auto out = AddRmsNormFn::apply(x, r, weight, eps);
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

bool fused_add_rms_norm_takes(const torch::Tensor&, const torch::Tensor&, torch::ScalarType) { return false; }

std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, double, torch::ScalarType) {
  TORCH_CHECK(false, "fused_add_rms_norm: this build has no CUDA kernels (LibTorch without CUDA, or no nvcc at build time)");
}

#endif

}  // namespace lm::model
