#include "model/fused_ops.h"

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/fused_kernels.h"

#include <cmath>

#ifdef LM_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lm::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

kernels::DType kernel_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return kernels::DType::kFloat32;
    case torch::kBFloat16: return kernels::DType::kBFloat16;
    case torch::kFloat16: return kernels::DType::kFloat16;
    default: TORCH_CHECK(false, "lmforge kernels: dtype ", t.scalar_type(), " not supported (fp32, bf16, fp16)");
  }
}

// The device-specific launches: the CPU kernels (model/kernels/cpu_kernels.h) on CPU tensors,
// the CUDA ones (model/kernels/fused_kernels.h) where this build has them.
#ifdef LM_HAVE_CUDA_KERNELS
void check(int err, const char* what) {
  TORCH_CHECK(err >= 0, "a CUDA error of earlier work was pending before lmforge CUDA kernel ", what,
              " launched (an asynchronous failure of an op before it, not this kernel; CUDA_LAUNCH_BLOCKING=1 "
              "names the op): ", kernels::error_string(err));
  TORCH_CHECK(err == 0, "lmforge CUDA kernel ", what, " failed to launch: ", kernels::error_string(err));
}
void* stream_of(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
#define LM_CUDA_LAUNCH(on, what, call)             \
  do {                                            \
    const c10::cuda::CUDAGuard guard(on.device()); \
    check(call, what);                            \
  } while (0)
#else
#define LM_CUDA_LAUNCH(on, what, call) \
  TORCH_CHECK(false, what, ": this build has no CUDA kernels (LibTorch without CUDA, or no nvcc at build time)")
#endif

void swiglu_fwd(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& y) {
  if (a.is_cpu()) return kernels::cpu::swiglu_forward(a.data_ptr(), b.data_ptr(), y.data_ptr(), a.numel(), kernel_dtype(a));
  LM_CUDA_LAUNCH(a, "swiglu_forward", kernels::swiglu_forward(a.data_ptr(), b.data_ptr(), y.data_ptr(), a.numel(),
                                                           kernel_dtype(a), stream_of(a)));
}

void swiglu_bwd(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& g, const torch::Tensor& da,
                const torch::Tensor& db) {
  if (a.is_cpu())
    return kernels::cpu::swiglu_backward(a.data_ptr(), b.data_ptr(), g.data_ptr(), da.data_ptr(), db.data_ptr(),
                                         a.numel(), kernel_dtype(a));
  LM_CUDA_LAUNCH(a, "swiglu_backward", kernels::swiglu_backward(a.data_ptr(), b.data_ptr(), g.data_ptr(), da.data_ptr(),
                                                             db.data_ptr(), a.numel(), kernel_dtype(a), stream_of(a)));
}

// Rotates q and k (contiguous [B, T, H, D]) by the fp32 tables; `inverse` for the backward pass.
std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                                             const torch::Tensor& sin, bool inverse) {
  auto yq = torch::empty_like(q), yk = torch::empty_like(k);
  if (q.is_cpu()) {
    kernels::cpu::rope(q.data_ptr(), k.data_ptr(), yq.data_ptr(), yk.data_ptr(), cos.data_ptr<float>(),
                       sin.data_ptr<float>(), q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), inverse,
                       kernel_dtype(q));
  } else {
    LM_CUDA_LAUNCH(q, "rope_forward",
                   kernels::rope_forward(q.data_ptr(), k.data_ptr(), yq.data_ptr(), yk.data_ptr(), cos.data_ptr<float>(),
                                         sin.data_ptr<float>(), q.size(0), q.size(1), q.size(2), k.size(2), q.size(3),
                                         inverse, kernel_dtype(q), stream_of(q)));
  }
  return {yq, yk};
}

// s = x + r (r may be undefined on CPU: then s is x) and y = rms_norm(s) * w; fills s, y, rstd.
void add_norm_fwd(const torch::Tensor& x, const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& s,
                  const torch::Tensor& y, const torch::Tensor& rstd, double eps) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  if (x.is_cpu())
    return kernels::cpu::add_rms_norm_forward(x.data_ptr(), r.defined() ? r.data_ptr() : nullptr, w.data_ptr<float>(),
                                              r.defined() ? s.data_ptr() : nullptr, y.data_ptr(),
                                              rstd.data_ptr<float>(), rows, C, static_cast<float>(eps),
                                              kernel_dtype(x), kernel_dtype(y));
  LM_CUDA_LAUNCH(x, "add_rms_norm_forward",
                 kernels::add_rms_norm_forward(x.data_ptr(), r.data_ptr(), w.data_ptr<float>(), s.data_ptr(),
                                               y.data_ptr(), rstd.data_ptr<float>(), rows, C, static_cast<float>(eps),
                                               kernel_dtype(x), kernel_dtype(r), stream_of(x)));
}

// ds (and the returned fp32 dw [C]) from dy and ds_in (undefined when nothing reached s).
torch::Tensor add_norm_bwd(const torch::Tensor& dy, const torch::Tensor& ds_in, const torch::Tensor& s,
                           const torch::Tensor& w, const torch::Tensor& rstd, const torch::Tensor& ds) {
  const int64_t C = s.size(-1), rows = s.numel() / C;
  const void* din = ds_in.defined() ? ds_in.data_ptr() : nullptr;
  if (s.is_cpu()) {
    auto dw = torch::empty({C}, s.options().dtype(torch::kFloat32));
    kernels::cpu::add_rms_norm_backward(dy.data_ptr(), din, s.data_ptr(), w.data_ptr<float>(), rstd.data_ptr<float>(),
                                        ds.data_ptr(), dw.data_ptr<float>(), rows, C, kernel_dtype(s),
                                        kernel_dtype(dy));
    return dw;
  }
#ifdef LM_HAVE_CUDA_KERNELS
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 4 * sms));
  auto dw_partial = torch::empty({blocks, C}, s.options().dtype(torch::kFloat32));
  LM_CUDA_LAUNCH(s, "add_rms_norm_backward",
                 kernels::add_rms_norm_backward(dy.data_ptr(), din, s.data_ptr(), w.data_ptr<float>(),
                                                rstd.data_ptr<float>(), ds.data_ptr(), dw_partial.data_ptr<float>(),
                                                rows, C, blocks, kernel_dtype(s), kernel_dtype(dy), stream_of(s)));
  return dw_partial.sum(0);
#else
  LM_CUDA_LAUNCH(s, "add_rms_norm_backward", 0);
  return {};
#endif
}

void check_device(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  TORCH_CHECK(a.device() == b.device() && (a.is_cpu() || a.is_cuda()), what, ": tensors on one CPU or CUDA device");
  TORCH_CHECK(a.is_cpu() || cuda_kernels_compiled(), what,
              ": this build has no CUDA kernels (LibTorch without CUDA, or no nvcc at build time)");
  TORCH_CHECK(!a.is_cpu() || kernels::cpu::takes(kernel_dtype(a)), what, ": the CPU kernels take fp32 and bf16, not ",
              a.scalar_type());
}

// The norm's backward from its saved {s, w, rstd}: ds (s's dtype) and dw (fp32 [C]) for the
// gradients that reached s (gs) and y (gy, either may be undefined); dy is read in `y_dtype`.
std::pair<torch::Tensor, torch::Tensor> norm_backward(const std::vector<torch::Tensor>& saved, const torch::Tensor& gs,
                                                      const torch::Tensor& gy, torch::ScalarType y_dtype) {
  const auto& s = saved[0];
  auto ds_in = gs.defined() ? gs.to(s.scalar_type()).contiguous() : torch::Tensor();
  if (!gy.defined())  // only s reached a loss: the norm passes nothing back
    return {ds_in.defined() ? ds_in : torch::zeros_like(s), torch::zeros({s.size(-1)}, s.options().dtype(torch::kFloat32))};
  auto ds = torch::empty_like(s);
  auto dw = add_norm_bwd(gy.to(y_dtype).contiguous(), ds_in, s, saved[1], saved[2], ds);
  return {ds, dw};
}

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    check_device(gate, up, "fused_swiglu");
    TORCH_CHECK(gate.sizes() == up.sizes(), "fused_swiglu: gate ", gate.sizes(), " and up ", up.sizes(), " differ");
    auto a = gate.contiguous();
    auto b = up.to(a.scalar_type()).contiguous();
    auto y = torch::empty_like(a);
    swiglu_fwd(a, b, y);
    ctx->save_for_backward({a, b});
    ctx->saved_data["up_dtype"] = static_cast<int64_t>(up.scalar_type());
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& a = saved[0];
    const auto& b = saved[1];
    if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor()};
    auto g = grads[0].to(a.scalar_type()).contiguous();
    auto da = torch::empty_like(a), db = torch::empty_like(b);
    swiglu_bwd(a, b, g, da, db);
    const auto up_dtype = static_cast<c10::ScalarType>(ctx->saved_data["up_dtype"].toInt());
    return {da, db.to(up_dtype)};
  }
};

struct RopeFn : torch::autograd::Function<RopeFn> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& cos, const torch::Tensor& sin) {
    check_device(q, k, "fused_rope");
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
    const int64_t C = x.size(-1), rows = x.numel() / C;
    auto xc = x.contiguous(), rc = r.contiguous();
    auto w = weight.to(torch::kFloat32).contiguous();
    auto s = torch::empty_like(xc), y = torch::empty_like(rc);
    auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    add_norm_fwd(xc, rc, w, s, y, rstd, eps);
    ctx->save_for_backward({s, w, rstd});
    ctx->saved_data["r_dtype"] = static_cast<int64_t>(r.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return {s, y};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto r_dtype = static_cast<c10::ScalarType>(ctx->saved_data["r_dtype"].toInt());
    const auto w_dtype = static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    auto [ds, dw] = norm_backward(saved, grads[0], grads[1], r_dtype);
    return {ds, ds.to(r_dtype), dw.to(w_dtype), torch::Tensor()};
  }
};

// The plain RMSNorm on the CPU: the kernel above without the add (s is x).
struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps,
                               int64_t out_dtype) {
    const int64_t C = x.size(-1), rows = x.numel() / C;
    auto xc = x.contiguous();
    auto w = weight.to(torch::kFloat32).contiguous();
    auto y = torch::empty(xc.sizes(), xc.options().dtype(static_cast<torch::ScalarType>(out_dtype)));
    auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    add_norm_fwd(xc, torch::Tensor(), w, xc, y, rstd, eps);
    ctx->save_for_backward({xc, w, rstd});
    ctx->saved_data["y_dtype"] = out_dtype;
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto y_dtype = static_cast<c10::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    const auto w_dtype = static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    auto [dx, dw] = norm_backward(saved, torch::Tensor(), grads[0], y_dtype);
    return {dx, dw.to(w_dtype), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

// Causal attention on the CPU (issue 32): the forward is ATen's flash kernel (it also returns the
// rows' log-sum-exp), the backward ours, one head at a time on ATen's intra-op threads: the
// head's probabilities P = exp(q kᵀ scale - lse) recomputed into a [T, T] fp32 buffer that stays
// in cache, dV = Pᵀ dO, dP = dO vᵀ, dS = P (dP - rowsum(dO o)) scale, dQ = dS k, dK = dSᵀ q.
// The scores and dP are fp32 matmuls (bf16 inputs widened first); under bf16 the three
// matmuls into the gradients take P and dS rounded to bf16, as ATen's flash backward does.
// ATen's flash backward spends 2.8-7.5x its forward at the small presets' head size (32)
// (docs/performance.md, "Attention's backward on the CPU"). fp32 (where the BLAS is found) is all
// lmforge's, forward too: kernels::cpu::attention_forward_f32 / _backward_f32, the same steps
// on raw sgemm calls in causal row blocks of 64 (ATen's per-call cost made small blocks lose).
struct CpuAttentionFn : torch::autograd::Function<CpuAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    if (own_f32(q)) {
      const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
      // o laid out [B, T, H, D]: the model's transpose back to [B, T, H * D] is then a view.
      auto o = at::empty({B, T, H, D}, q.options()).transpose(1, 2);
      auto lse = at::empty({B, H, T}, q.options());
      kernels::cpu::attention_forward_f32(heads(q), heads(k), heads(v), heads_out(o), lse.data_ptr<float>(), B, H, T,
                                          D, static_cast<float>(scale));
      ctx->save_for_backward({q, k, v, o, lse});
      return o;
    }
    auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, {}, scale);
    ctx->save_for_backward({q, k, v, o, lse});
    return o;
  }

  // fp32 with the BLAS found: lmforge's forward and backward (kernels::cpu::attention_*_f32).
  static bool own_f32(const torch::Tensor& q) {
    return q.scalar_type() == torch::kFloat32 && kernels::cpu::attention_f32_available();
  }
  static kernels::cpu::Heads heads(const torch::Tensor& t) {
    return {t.data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2)};
  }
  static kernels::cpu::HeadsOut heads_out(const torch::Tensor& t) {
    return {t.data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2)};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    // Detached: the matmuls below write into buffers (out= variants), and the worker threads
    // run with grad mode on whatever the caller's is.
    auto saved = ctx->get_saved_variables();
    for (auto& t : saved) t = t.detach();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3];
    const auto lse = saved[4].contiguous();  // [B, H, T] fp32
    auto g = grads[0].detach();
    if (g.stride(-1) != 1) g = g.contiguous();
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    // Gradients laid out as the projections give q, k, v ([B, T, H, D] storage).
    auto grad_of = [&](const torch::Tensor& x) { return at::empty({B, T, H, D}, x.options()).transpose(1, 2); };
    auto dq = grad_of(q), dk = grad_of(k), dv = grad_of(v);
    if (own_f32(q)) {
      kernels::cpu::attention_backward_f32(heads(q), heads(k), heads(v), heads(o), heads(g), lse.data_ptr<float>(),
                                           heads_out(dq), heads_out(dk), heads_out(dv), B, H, T, D, scale);
    } else {
      backward_on_aten(q, k, v, o, g, lse, dq, dk, dv, scale);
    }
    return {dq, dk, dv};
  }

  // bf16 (and fp32 without the BLAS): per head on ATen's threads, the matmuls as at::mm_out on
  // views of the head, P and dS in [T, T] fp32 buffers (bf16 copies for the gradient matmuls).
  static void backward_on_aten(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& o, const torch::Tensor& g, const torch::Tensor& lse,
                               const torch::Tensor& dq, const torch::Tensor& dk, const torch::Tensor& dv, float scale) {
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
    const bool low = q.scalar_type() == torch::kBFloat16;
    const auto dt = kernel_dtype(q);
    const auto f32 = q.options().dtype(torch::kFloat32);
    // Causal blocks of 256 rows: row block r (rows r0..r1-1) sees keys 0..r1-1 only, so the
    // scores, dP and dQ of a row block, and dK, dV of a key block (rows c0..T-1), skip the masked
    // upper blocks; the diagonal blocks' masked entries are zeros. Smaller blocks were measured
    // slower at T = 256 (bf16, 1 thread, small preset: attention forward + backward 44.8 ms with
    // one block, 48.2 with 128 rows, 62.4 with 64, 84.6 with 32; SDPA 60.5): each matmul call
    // costs more than the masked work it skips.
    const int64_t rb = std::min<int64_t>(T, 256);
    const int64_t nb = (T + rb - 1) / rb;
    kernels::cpu::parallel_ranges(B * H, 1, [&](int64_t lo, int64_t hi) {
      auto S = at::empty({T, T}, f32), dP = at::empty({T, T}, f32), di = at::empty({T}, f32);
      auto L = low ? at::empty({T, T}, q.options()) : torch::Tensor();  // P, then dS, in bf16
      float* s_ptr = S.data_ptr<float>();
      float* dp_ptr = dP.data_ptr<float>();
      auto block = [](const torch::Tensor& m, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        return m.narrow(0, r0, r1 - r0).narrow(1, c0, c1 - c0);
      };
      for (int64_t u = lo; u < hi; ++u) {
        const int64_t b = u / H, h = u % H;
        auto qh = q[b][h], kh = k[b][h], vh = v[b][h], oh = o[b][h], gh = g[b][h];
        auto wide = [&](const torch::Tensor& x) { return low ? x.to(torch::kFloat32) : x; };
        const auto qf = wide(qh), kf = wide(kh), vf = wide(vh), gf = wide(gh);
        const float* lse_h = lse[b][h].data_ptr<float>();
        kernels::cpu::attention_rowdot(gh.data_ptr(), oh.data_ptr(), di.data_ptr<float>(), T, D, gh.stride(0),
                                       oh.stride(0), dt);
        for (int64_t r = 0; r < nb; ++r) {  // P, dS of row block r against keys 0..r1-1
          const int64_t r0 = r * rb, r1 = std::min(T, r0 + rb);
          auto Sb = block(S, r0, r1, 0, r1), dPb = block(dP, r0, r1, 0, r1);
          at::mm_out(Sb, qf.narrow(0, r0, r1 - r0), kf.narrow(0, 0, r1).t());
          at::mm_out(dPb, gf.narrow(0, r0, r1 - r0), vf.narrow(0, 0, r1).t());
          void* low_b = low ? static_cast<void*>(static_cast<at::BFloat16*>(L.data_ptr()) + r0 * T) : nullptr;
          kernels::cpu::attention_probs(s_ptr + r0 * T, lse_h + r0, low_b, r1 - r0, r1, T, r0, scale, dt);
        }
        // dV[c] = P[c0.., c]ᵀ dO[c0..] (bf16: L holds P until dS overwrites it below).
        const auto& P = low ? L : S;
        for (int64_t c = 0; c < nb; ++c) {
          const int64_t c0 = c * rb, c1 = std::min(T, c0 + rb);
          auto dvb = dv[b][h].narrow(0, c0, c1 - c0);
          at::mm_out(dvb, block(P, c0, T, c0, c1).t(), gh.narrow(0, c0, T - c0));
        }
        const auto& dS = low ? L : dP;
        for (int64_t r = 0; r < nb; ++r) {  // dS, then dQ of row block r (its own dS rows only)
          const int64_t r0 = r * rb, r1 = std::min(T, r0 + rb);
          void* low_b = low ? static_cast<void*>(static_cast<at::BFloat16*>(L.data_ptr()) + r0 * T) : nullptr;
          kernels::cpu::attention_dscores(s_ptr + r0 * T, dp_ptr + r0 * T, di.data_ptr<float>() + r0, low_b, r1 - r0,
                                          r1, T, scale, dt);
          auto dqb = dq[b][h].narrow(0, r0, r1 - r0);
          at::mm_out(dqb, block(dS, r0, r1, 0, r1), kh.narrow(0, 0, r1));
        }
        for (int64_t c = 0; c < nb; ++c) {  // dK[c] = dS[c0.., c]ᵀ q[c0..]
          const int64_t c0 = c * rb, c1 = std::min(T, c0 + rb);
          auto dkb = dk[b][h].narrow(0, c0, c1 - c0);
          at::mm_out(dkb, block(dS, c0, T, c0, c1).t(), qh.narrow(0, c0, T - c0));
        }
      }
    });
  }
};

bool cuda_kernels_compiled() {
#ifdef LM_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool cpu_kernels_take(const torch::Tensor& t) {
  return t.is_cpu() && (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16);
}

torch::Tensor fused_swiglu(const torch::Tensor& gate, const torch::Tensor& up) { return SwigluFn::apply(gate, up); }

bool cpu_causal_attention_takes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return cpu_kernels_take(q) && q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes() &&
         k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() && q.stride(-1) == 1 &&
         k.stride(-1) == 1 && v.stride(-1) == 1;
}

bool cpu_causal_attention_routes(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 || (dtype == torch::kFloat32 && kernels::cpu::attention_f32_available());
}

torch::Tensor cpu_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(cpu_causal_attention_takes(q, k, v), "cpu_causal_attention: q, k, v must be fp32 or bf16 CPU tensors of one ",
              "shape [B, H, T, D] (no grouped-query) with unit inner stride; got ", q.sizes(), " ", k.sizes());
  return CpuAttentionFn::apply(q, k, v);
}

std::pair<torch::Tensor, torch::Tensor> fused_rope(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& cos, const torch::Tensor& sin) {
  auto out = RopeFn::apply(q, k, cos, sin);
  return {out[0], out[1]};
}

bool fused_add_rms_norm_takes(const torch::Tensor& x, const torch::Tensor& r, torch::ScalarType out_dtype) {
  const bool device_ok = x.is_cpu() ? cpu_kernels_take(x) && cpu_kernels_take(r)
                                    : x.is_cuda() && cuda_kernels_compiled() && x.size(-1) <= kernels::kAddRmsNormMaxCols;
  return device_ok && r.scalar_type() == out_dtype && r.device() == x.device() &&
         c10::promoteTypes(x.scalar_type(), r.scalar_type()) == x.scalar_type() && x.dim() >= 1 && x.numel() > 0;
}

std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& r,
                                                           const torch::Tensor& weight, double eps,
                                                           torch::ScalarType out_dtype) {
  TORCH_CHECK(r.device() == x.device() && weight.device() == x.device(), "fused_add_rms_norm: tensors on one device");
  TORCH_CHECK(x.sizes() == r.sizes() && x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "fused_add_rms_norm: x ", x.sizes(), ", r ", r.sizes(), " and weight ", weight.sizes(), " do not match");
  TORCH_CHECK(fused_add_rms_norm_takes(x, r, out_dtype), "fused_add_rms_norm: x ", x.scalar_type(), ", r ",
              r.scalar_type(), " to ", out_dtype, " with ", x.size(-1), " columns on ", x.device(),
              " is not a case the kernels take");
  auto out = AddRmsNormFn::apply(x, r, weight, eps);
  return {out[0], out[1]};
}

torch::Tensor cpu_fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps, torch::ScalarType out_dtype) {
  TORCH_CHECK(cpu_kernels_take(x) && weight.is_cpu() && (out_dtype == torch::kFloat32 || out_dtype == torch::kBFloat16),
              "cpu_fused_rms_norm: x ", x.scalar_type(), " on ", x.device(), " to ", out_dtype,
              " is not a case the CPU kernel takes (fp32 or bf16 CPU tensors)");
  TORCH_CHECK(x.dim() >= 1 && x.numel() > 0 && weight.dim() == 1 && weight.size(0) == x.size(-1), "cpu_fused_rms_norm: x ",
              x.sizes(), " and weight ", weight.sizes(), " do not match");
  return RmsNormFn::apply(x, weight, eps, static_cast<int64_t>(out_dtype));
}

namespace {

// The argument checks of both CPU cross-entropy entry points.
void check_xent_args(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(cpu_kernels_take(logits) && logits.dim() == 2 && logits.is_contiguous(), "cpu_softmax_xent_: logits ",
              logits.sizes(), " ", logits.scalar_type(), " on ", logits.device(),
              " must be contiguous fp32 or bf16 [n, V] on the CPU");
  TORCH_CHECK(targets.is_cpu() && targets.scalar_type() == torch::kInt64 && targets.dim() == 1 &&
                  targets.size(0) == logits.size(0) && targets.is_contiguous(),
              "cpu_softmax_xent_: targets ", targets.sizes(), " for logits ", logits.sizes(), " (int64, contiguous)");
  if (targets.numel() > 0) {
    const auto [lo, hi] = torch::aminmax(targets);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < logits.size(1),
                "cpu_softmax_xent_: a target is outside [0, ", logits.size(1), ")");
  }
}

}  // namespace

double cpu_softmax_xent_(const torch::Tensor& logits, const torch::Tensor& targets, double grad_scale) {
  check_xent_args(logits, targets);
  return kernels::cpu::softmax_xent(logits.data_ptr(), targets.data_ptr<int64_t>(), logits.size(0), logits.size(1),
                                    static_cast<float>(grad_scale), kernel_dtype(logits));
}

torch::Tensor cpu_softmax_xent_rows(const torch::Tensor& logits, const torch::Tensor& targets) {
  check_xent_args(logits, targets);
  auto nats = torch::empty({logits.size(0)}, torch::kFloat64);
  kernels::cpu::softmax_xent_rows(logits.data_ptr(), targets.data_ptr<int64_t>(), logits.size(0), logits.size(1),
                                  nats.data_ptr<double>(), kernel_dtype(logits));
  return nats;
}

}  // namespace lm::model
