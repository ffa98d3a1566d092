#include "bench/kernel_timing.h"

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "model/fused_ops.h"
#include "model/transformer.h"

namespace lm::bench {
namespace {

using Tensors = std::vector<torch::Tensor>;
using Fn = std::function<Tensors(bool fast, const Tensors& in)>;

// One kernel: its inputs (leaves), the gradients its outputs receive, and both implementations.
struct Case {
  std::string op;
  std::vector<int64_t> shape;
  double bytes;  // moved by the fused implementation, forward + backward
  Tensors inputs, upstream;
  Fn fn;
};

void sync(torch::Device d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index() < 0 ? -1 : d.index());
}

// Forward and backward once; returns the outputs and the inputs' gradients.
Tensors step(const Case& c, bool fast) {
  Tensors in;
  for (const auto& x : c.inputs) in.push_back(x.detach().requires_grad_(true));
  auto out = c.fn(fast, in);
  auto grads = torch::autograd::grad(out, in, c.upstream);
  for (auto& o : out) grads.push_back(o.detach());
  return grads;
}

double time_ms(const Case& c, bool fast, torch::Device d, int iters) {
  for (int i = 0; i < 3; ++i) step(c, fast);
  sync(d);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step(c, fast);
  sync(d);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

double max_rel_err(const Tensors& a, const Tensors& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto af = a[i].to(torch::kFloat32), bf = b[i].to(torch::kFloat32);
    const double scale = bf.abs().max().item<double>();
    worst = std::max(worst, (af - bf).abs().max().item<double>() / (scale > 0 ? scale : 1.0));
  }
  return worst;
}

std::vector<Case> cases(const model::ModelConfig& cfg, int64_t B, int64_t T, torch::Device d, torch::ScalarType dt) {
  torch::manual_seed(7);
  auto opt = torch::TensorOptions().device(d).dtype(dt);
  auto f32 = torch::TensorOptions().device(d).dtype(torch::kFloat32);
  const double es = static_cast<double>(torch::elementSize(dt));
  const int64_t H = cfg.n_heads, Hkv = cfg.n_kv_heads, D = cfg.head_dim(), C = cfg.d_model, F = cfg.d_ff;
  std::vector<Case> out;
  auto name = [&](const char* op) { return std::string(op) + (d.is_cuda() ? ".cuda" : ".cpu"); };

  // swiglu: reads a, b, writes y; backward reads a, b, g, writes da, db.
  out.push_back({name("swiglu"), {B, T, F}, 8.0 * es * B * T * F, {torch::randn({B, T, F}, opt), torch::randn({B, T, F}, opt)},
                 {torch::randn({B, T, F}, opt)}, [](bool fast, const Tensors& x) -> Tensors {
                   if (fast) return {model::fused_swiglu(x[0], x[1])};
                   return {torch::nn::functional::silu(x[0]) * x[1]};
                 }});

  // rope: q [B, T, H, D] and k [B, T, Hkv, D] read and written, forward and backward.
  auto [cos, sin] = model::rotary_tables(T, D, cfg.rope_theta, 0, d);
  const double qk = static_cast<double>(B * T * (H + Hkv) * D);
  out.push_back({name("rope"), {B, T, H + Hkv, D}, 4.0 * es * qk,
                 {torch::randn({B, T, H, D}, opt), torch::randn({B, T, Hkv, D}, opt)},
                 {torch::randn({B, T, H, D}, opt), torch::randn({B, T, Hkv, D}, opt)},
                 [cos = cos, sin = sin](bool fast, const Tensors& x) -> Tensors {
                   if (fast) {
                     auto [q, k] = model::fused_rope(x[0], x[1], cos, sin);
                     return {q, k};
                   }
                   return {model::apply_rotary(x[0].transpose(1, 2), cos, sin).transpose(1, 2),
                           model::apply_rotary(x[1].transpose(1, 2), cos, sin).transpose(1, 2)};
                 }});

  // add + RMSNorm with an fp32 residual stream, as under autocast: forward reads x (fp32), r,
  // writes s (fp32), y; backward reads dy, ds_in (fp32), s (fp32), writes ds (fp32), and the cast
  // of ds to r's dtype reads ds again and writes dr.
  const double n = static_cast<double>(B * T * C);
  const double eps = cfg.norm_eps;
  out.push_back({name("add_rms_norm"), {B, T, C}, n * (4 + es + 4 + es + es + 4 + 4 + 4 + 4 + es),
                 {torch::randn({B, T, C}, f32), torch::randn({B, T, C}, opt), 1.0 + 0.1 * torch::randn({C}, f32)},
                 {torch::randn({B, T, C}, f32), torch::randn({B, T, C}, opt)},
                 [eps, dt](bool fast, const Tensors& x) -> Tensors {
                   if (fast) {
                     auto [s, y] = model::fused_add_rms_norm(x[0], x[1], x[2], eps, dt);
                     return {s, y};
                   }
                   auto s = x[0] + x[1];  // the model's path without the kernel: ATen's rms_norm on CUDA
                   auto y = s.is_cuda() ? model::fused_rms_norm(s, x[2], eps) : model::reference_rms_norm(s, x[2], eps);
                   return {s, y.to(dt)};
                 }});
  if (d.is_cpu() && Hkv == H) {
    // Causal attention: ATen's flash forward with lmforge's backward against SDPA (ATen's flash
    // forward and backward), q, k, v as the model gives them ([B, H, T, D] views of [B, T, H, D]).
    // Bytes: q, k, v, o, dO read and dq, dk, dv written once (the [T, T] blocks stay in cache).
    auto heads = [&] { return torch::randn({B, T, H, D}, opt).transpose(1, 2); };
    out.push_back({"attention.cpu", {B, H, T, D}, 8.0 * es * B * H * T * D, {heads(), heads(), heads()},
                   {torch::randn({B, T, H, D}, opt).transpose(1, 2)}, [](bool fast, const Tensors& x) -> Tensors {
                     if (fast) return {model::cpu_causal_attention(x[0], x[1], x[2])};
                     return {model::fused_attention(x[0], x[1], x[2])};
                   }});
  }
  if (d.is_cpu()) {
    // The chunked loss with the CPU row kernel against the same chunked loss on ATen's ops (both
    // include the LM head's matmuls): forward reads the logits once and writes the gradient.
    const int64_t V = cfg.vocab_size, N = B * T;
    out.push_back({"cross_entropy.cpu", {N, V}, 2.0 * es * N * V, {torch::randn({N, C}, opt), 0.02 * torch::randn({V, C}, opt)},
                   {torch::ones({}, f32)}, [t = torch::randint(V, {N}, torch::kInt64)](bool fast, const Tensors& x) -> Tensors {
                     return {model::linear_cross_entropy(x[0], x[1], t, 0, fast)};
                   }});
  }
  return out;
}

}  // namespace

Json time_own_kernels(const model::ModelConfig& cfg, int64_t batch, int64_t seq, torch::Device device,
                      torch::ScalarType dtype, int iters) {
  const bool fast_ok = device.is_cpu() || model::cuda_kernels_compiled();
  Json ops = Json::array();
  for (const auto& c : cases(cfg, batch, seq, device, dtype)) {
    Json row = {{"op", c.op}, {"shape", absl::StrJoin(c.shape, "x")}, {"bytes", c.bytes}};
    const double ref = time_ms(c, false, device, iters);
    row["ref_ms"] = ref;
    if (fast_ok) {
      const double fast = time_ms(c, true, device, iters);
      row["fast_ms"] = fast;
      row["speedup"] = ref / fast;
      row["fast_gbps"] = c.bytes / (fast * 1e-3) / 1e9;
      row["max_rel_err"] = max_rel_err(step(c, true), step(c, false));
    } else {
      row["fast_ms"] = row["speedup"] = row["fast_gbps"] = row["max_rel_err"] = nullptr;
    }
    ops.push_back(row);
  }
  return {{"impl", "lmforge"}, {"mode", "kernels"}, {"device", device.str()},
          {"dtype", std::string(c10::toString(dtype))}, {"batch", batch}, {"seq", seq}, {"iters", iters},
          {"kernels_compiled", model::cuda_kernels_compiled()}, {"ops", ops}};
}

}  // namespace lm::bench
