#include "model/transformer.h"

#include <ATen/autocast_mode.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <tuple>
#include <utility>

#include "model/fused_ops.h"
#include "model/recompute.h"

namespace lm::model {

namespace F = torch::nn::functional;

namespace {
// The dtype matmuls run in on h's device: the autocast dtype when autocast is on there.
torch::ScalarType compute_dtype(const torch::Tensor& h) {
  const auto dev = h.device().type();
  if (at::autocast::is_autocast_enabled(dev)) return at::autocast::get_autocast_dtype(dev);
  return h.scalar_type();
}

// Whether lmforge's own kernel runs on `t`: the CUDA one where its switch is on, the CPU one
// where its switch is on and it takes the dtype.
bool own_kernel(const torch::Tensor& t, bool cuda_on, bool cpu_on) {
  return t.is_cuda() ? cuda_on : cpu_on && cpu_kernels_take(t);
}

// The registry name of a path whose CUDA and CPU kernels share one wrapper.
const char* per_device(const torch::Tensor& t, const char* cuda_name, const char* cpu_name) {
  return t.is_cuda() ? cuda_name : cpu_name;
}

}  // namespace

namespace {
std::mutex g_break_mu;
std::string g_break_fast_path;  // guarded by g_break_mu; see set_debug_break_fast_path
std::atomic<bool> g_break_any{false};
}  // namespace

void set_debug_break_fast_path(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_break_mu);
  g_break_fast_path = name;
  g_break_any = !name.empty();
}

bool debug_break_fast_path(const char* name) {
  if (!g_break_any.load(std::memory_order_relaxed)) return false;  // the normal case: one load
  std::lock_guard<std::mutex> lock(g_break_mu);
  return g_break_fast_path == name;
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

// Both normalise in fp32 so bf16 activations do not lose the small-variance tail. The output is
// in the dtype the next matmuls compute in (the autocast dtype when autocast is on): rounded once
// here, as autocast would round it, instead of once per consuming projection (q, k, v; gate,
// up), which also sums one gradient instead of three in the backward.
torch::Tensor reference_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto xf = x.to(torch::kFloat32);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (y * weight).to(compute_dtype(x));
}

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto out_dtype = compute_dtype(x);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // fp32 inside, as the reference
  auto y = at::rms_norm(x.to(torch::kFloat32), {x.size(-1)}, weight.to(torch::kFloat32), eps).to(out_dtype);
  return debug_break_fast_path("rms_norm.aten") ? y * 1.05 : y;
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (use_fused && x.is_cuda()) return fused_rms_norm(x, weight, eps_);
  const auto out_dtype = compute_dtype(x);
  if (use_cpu_kernel && cpu_kernels_take(x) && (out_dtype == torch::kFloat32 || out_dtype == torch::kBFloat16)) {
    auto y = cpu_fused_rms_norm(x, weight, eps_, out_dtype);
    return debug_break_fast_path("rms_norm.cpu") ? y * 1.05 : y;
  }
  return reference_rms_norm(x, weight, eps_);
}

torch::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling,
                                       torch::Device device) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // inv_freq[i] = theta^(-2i/D), i in [0, D/2)
  auto inv_freq = torch::pow(theta, -torch::arange(0, head_dim, 2, opts) / head_dim);
  if (scaling.type != "llama3") return inv_freq;
  // Llama 3.1 (transformers' _compute_llama3_parameters): wavelengths longer than the original
  // context / low_freq_factor are divided by `factor`, shorter than context / high_freq_factor
  // kept, and those between interpolated by smooth = (ctx / wavelen - low) / (high - low).
  const double ctx = static_cast<double>(scaling.original_max_position_embeddings);
  const double low = scaling.low_freq_factor, high = scaling.high_freq_factor, factor = scaling.factor;
  const double low_wavelen = ctx / low, high_wavelen = ctx / high;
  auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = torch::where(wavelen > low_wavelen, inv_freq / factor, inv_freq);
  auto smooth = (ctx / wavelen - low) / (high - low);
  auto smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t seq_len, int64_t head_dim,
                                                      double theta, int64_t offset,
                                                      torch::Device device, const RopeScaling& scaling) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto inv_freq = rope_inverse_frequencies(head_dim, theta, scaling, device);
  auto pos = torch::arange(offset, offset + seq_len, opts);
  auto freqs = torch::outer(pos, inv_freq);      // [T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);     // [T, D]
  return {emb.cos(), emb.sin()};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos,
                           const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  auto c = cos.to(x.scalar_type());
  auto s = sin.to(x.scalar_type());
  return x * c + rotated * s;
}

torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, bool causal) {
  const int64_t T = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, T, T]
  if (causal) {
    auto mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
                    .triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  // Softmax in fp32 for stability under bf16.
  auto probs = torch::softmax(scores.to(torch::kFloat32), -1).to(q.scalar_type());
  return torch::matmul(probs, v);
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  // SDPA picks the flash / memory-efficient / cuDNN kernel on GPUs and the flash CPU kernel on
  // CPUs; grouped-query k, v (fewer heads than q) go in as they are (enable_gqa), not repeated.
  auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, /*scale=*/std::nullopt,
                                            /*enable_gqa=*/k.size(1) != q.size(1));
  return debug_break_fast_path("attention.sdpa") ? y * 1.05 : y;
}

bool is_sdpa_backend(const std::string& name) {
  return name == "auto" || name == "flash" || name == "cudnn" || name == "efficient" || name == "math";
}

bool set_sdpa_backend(const std::string& name) {
  if (!is_sdpa_backend(name)) return false;
  const bool all = name == "auto";
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(all || name == "flash");
  ctx.setSDPUseCuDNN(all || name == "cudnn");
  ctx.setSDPUseMemEfficient(all || name == "efficient");
  ctx.setSDPUseMath(all || name == "math");
  return true;
}

namespace {

int64_t lce_chunk_rows(const torch::Tensor& h, int64_t vocab, int64_t requested) {
  if (requested > 0) return requested;
  // CPU: 64 MB (2,048 rows at V 8,192). Training writes each chunk's logits into the gradient
  // buffer it keeps anyway, so the size costs no memory there (evaluation: one scratch chunk),
  // and the head's matmul runs faster on 2,048 rows than on 128: fp32 small 16 x 256, 1 thread
  // +2.3%, 2 threads +5% over the old 4 MB; bf16 the same (docs/performance.md).
  const int64_t budget = h.is_cpu() ? (int64_t{64} << 20) : (int64_t{1} << 30);  // fp32 bytes
  return std::max<int64_t>(64, budget / (4 * vocab));
}

// Sum over rows of -log softmax(hc · wcᵀ)[target], chunk by chunk; when `grad` is given, also
// writes d(sum/N)/d(logits) into it ([N, V], hc's dtype).
//
// CPU: the fp32 softmax of the chunk is formed once (ATen 1.13 on this CPU: log_softmax with a
// dtype on bf16 input is ~3× slower than a cast plus fp32 softmax, and log_softmax is ~2.5× slower
// than softmax); the loss is -log p[target], exact in fp32 unless p[target] underflows (a row
// more than ~69 nats wrong), and such rows are recomputed exactly with log_softmax. The
// gradient is (p - onehot) / N, the same values autograd forms from log_softmax.
// The same with lmforge's CPU kernel (cpu_softmax_xent_): each chunk's logits are written by the
// matmul straight into `grad`'s rows (or a scratch chunk without it), and one pass over each row
// forms the log-sum-exp, the loss and (p - onehot) / N in place. Exact where p[target] underflows.
torch::Tensor lce_chunks_cpu(const torch::Tensor& hc, const torch::Tensor& wc, const torch::Tensor& targets,
                             int64_t chunk, torch::Tensor* grad) {
  const int64_t N = hc.size(0);
  const double inv_n = 1.0 / static_cast<double>(N);
  auto scratch = grad != nullptr ? torch::Tensor() : torch::empty({std::min(chunk, N), wc.size(0)}, hc.options());
  double total = 0;
  for (int64_t s = 0; s < N; s += chunk) {
    const int64_t n = std::min(chunk, N - s);
    auto logits = grad != nullptr ? grad->narrow(0, s, n) : scratch.narrow(0, 0, n);  // [n, V]
    torch::mm_out(logits, hc.narrow(0, s, n), wc.t());
    total += cpu_softmax_xent_(logits, targets.narrow(0, s, n), grad != nullptr ? inv_n : 0.0);
  }
  return torch::scalar_tensor(total * inv_n, hc.options().dtype(torch::kFloat32));
}

torch::Tensor lce_chunks(const torch::Tensor& hc, const torch::Tensor& wc, const torch::Tensor& targets,
                         int64_t chunk, torch::Tensor* grad, bool cpu_kernel) {
  if (cpu_kernel && cpu_kernels_take(hc)) return lce_chunks_cpu(hc, wc, targets, chunk, grad);
  const int64_t N = hc.size(0);
  const double inv_n = 1.0 / static_cast<double>(N);
  auto total = torch::zeros({}, hc.options().dtype(torch::kFloat32));
  for (int64_t s = 0; s < N; s += chunk) {
    const int64_t n = std::min(chunk, N - s);
    auto logits = torch::mm(hc.narrow(0, s, n), wc.t()).to(torch::kFloat32);  // [n, V]
    auto t = targets.narrow(0, s, n).unsqueeze(1);                            // [n, 1]
    torch::Tensor p;
    if (hc.is_cpu()) {
      p = torch::softmax(logits, -1);
      auto pt = p.gather(1, t);  // [n, 1]
      auto lpt = pt.log();
      auto tiny = pt < 1e-30;
      if (tiny.any().item<bool>()) {
        auto rows = tiny.squeeze(1).nonzero().squeeze(1);
        auto exact = torch::log_softmax(logits.index_select(0, rows), -1).gather(1, t.index_select(0, rows));
        lpt.index_copy_(0, rows, exact);
      }
      total.sub_(lpt.sum());
    } else {
      auto logp = torch::log_softmax(logits, -1);
      total.sub_(logp.gather(1, t).sum());
      if (grad != nullptr) p = logp.exp_();
    }
    if (grad != nullptr) {
      p.scatter_add_(1, t, torch::full({n, 1}, -1.0, p.options()));
      auto out = grad->narrow(0, s, n);
      torch::mul_out(out, p, torch::scalar_tensor(inv_n, p.options()));  // rounds into out's dtype
    }
  }
  return total.mul_(inv_n);
}

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h,
                               const torch::Tensor& w, const torch::Tensor& targets, int64_t chunk,
                               bool cpu_kernel) {
    const auto dt = compute_dtype(h);
    // The casts and matmuls below are chosen here; autocast must not re-cast inside.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto hc = h.to(dt).contiguous();
    auto wc = w.to(dt).contiguous();
    auto grad = torch::empty({hc.size(0), wc.size(0)}, hc.options());
    auto loss = lce_chunks(hc, wc, targets, chunk, &grad, cpu_kernel);
    ctx->save_for_backward({hc, wc, grad});
    ctx->saved_data["h_dtype"] = static_cast<int64_t>(h.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto& hc = saved[0];
    const auto& wc = saved[1];
    const auto& g = saved[2];
    const auto go = grad_out[0].to(torch::kFloat32);
    const auto h_dtype = static_cast<torch::ScalarType>(ctx->saved_data["h_dtype"].toInt());
    const auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    auto gh = torch::mm(g, wc).to(h_dtype).mul_(go);      // [N, C]
    auto gw = torch::mm(g.t(), hc).to(w_dtype).mul_(go);  // [V, C]
    return {gh, gw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& w,
                                   const torch::Tensor& targets, int64_t chunk_rows, bool cpu_kernel) {
  TORCH_CHECK(h.dim() == 2 && w.dim() == 2 && h.size(1) == w.size(1), "linear_cross_entropy: h ",
              h.sizes(), " and w ", w.sizes(), " do not match");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == h.size(0), "linear_cross_entropy: targets ",
              targets.sizes(), " for h ", h.sizes());
  const int64_t chunk = lce_chunk_rows(h, w.size(0), chunk_rows);
  auto t = targets.to(torch::kInt64).contiguous();
  const bool broken = debug_break_fast_path("loss.chunked") ||
                      (cpu_kernel && h.is_cpu() && debug_break_fast_path("cross_entropy.cpu"));
  if (torch::GradMode::is_enabled() && (h.requires_grad() || w.requires_grad())) {
    auto loss = LinearCrossEntropy::apply(h, w, t, chunk, cpu_kernel);
    return broken ? loss * 1.05 : loss;
  }
  const auto dt = compute_dtype(h);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  auto loss = lce_chunks(h.to(dt).contiguous(), w.to(dt).contiguous(), t, chunk, nullptr, cpu_kernel);
  return broken ? loss * 1.05 : loss;
}

torch::Tensor reference_linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& w,
                                             const torch::Tensor& targets) {
  auto logits = F::linear(h, w);
  return F::nll_loss(torch::log_softmax(logits, -1, torch::kFloat32), targets.to(torch::kInt64));
}

AttentionImpl::AttentionImpl(const ModelConfig& cfg)
    : use_fused(cfg.attention == "fused"),
      n_heads_(cfg.n_heads),
      n_kv_heads_(cfg.n_kv_heads),
      head_dim_(cfg.head_dim()) {
  auto lin = [&](const char* name, int64_t in, int64_t out, bool bias) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
  };
  q_proj = lin("q_proj", cfg.d_model, n_heads_ * head_dim_, cfg.attention_bias);
  k_proj = lin("k_proj", cfg.d_model, n_kv_heads_ * head_dim_, cfg.attention_bias);
  v_proj = lin("v_proj", cfg.d_model, n_kv_heads_ * head_dim_, cfg.attention_bias);
  o_proj = lin("o_proj", n_heads_ * head_dim_, cfg.d_model, false);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin) {
  const int64_t B = x.size(0), T = x.size(1);
  // x: [B, T, C] -> q: [B, H, T, D], k, v: [B, Hkv, T, D]
  auto qp = q_proj(x).view({B, T, n_heads_, head_dim_});
  auto kp = k_proj(x).view({B, T, n_kv_heads_, head_dim_});
  torch::Tensor q, k;
  if (own_kernel(qp, use_cuda_rope, use_cpu_rope)) {  // rotated in [B, T, H, D], q and k in one kernel
    auto [rq, rk] = fused_rope(qp, kp, cos, sin);
    q = rq.transpose(1, 2);
    k = rk.transpose(1, 2);
    if (debug_break_fast_path(per_device(qp, "rope.cuda", "rope.cpu"))) q = q * 1.05;
  } else {
    q = apply_rotary(qp.transpose(1, 2), cos, sin);
    k = apply_rotary(kp.transpose(1, 2), cos, sin);
  }
  auto v = v_proj(x).view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor y;
  // lmforge's CPU attention where it is faster than SDPA (cpu_causal_attention_routes).
  if (use_fused && !debug_break_causality && use_cpu_attention && cpu_causal_attention_routes(q.scalar_type()) &&
      cpu_causal_attention_takes(q, k, v)) {
    y = cpu_causal_attention(q, k, v);
    if (debug_break_fast_path("attention.cpu")) y = y * 1.05;
  } else if (use_fused && !debug_break_causality) {
    y = fused_attention(q, k, v);  // grouped-query natively
  } else {
    if (n_kv_heads_ != n_heads_) {
      // Grouped-query: kv head j serves query heads j*rep .. j*rep+rep-1 (HF repeat_kv order).
      const int64_t rep = n_heads_ / n_kv_heads_;
      k = k.repeat_interleave(rep, 1);
      v = v.repeat_interleave(rep, 1);
    }
    y = reference_attention(q, k, v, /*causal=*/!debug_break_causality);
  }
  // y: [B, H, T, D] -> [B, T, C]
  y = y.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_});
  return o_proj(y);
}

torch::Tensor AttentionImpl::forward_cached(const torch::Tensor& x, const torch::Tensor& cos,
                                            const torch::Tensor& sin, torch::Tensor* k_cache,
                                            torch::Tensor* v_cache) {
  const int64_t B = x.size(0), Tn = x.size(1);
  // x: [B, Tn, C] -> q: [B, H, Tn, D], k, v: [B, Hkv, Tn, D]
  auto q = apply_rotary(q_proj(x).view({B, Tn, n_heads_, head_dim_}).transpose(1, 2), cos, sin);
  auto k = apply_rotary(k_proj(x).view({B, Tn, n_kv_heads_, head_dim_}).transpose(1, 2), cos, sin);
  auto v = v_proj(x).view({B, Tn, n_kv_heads_, head_dim_}).transpose(1, 2);
  const int64_t Tp = k_cache->defined() ? k_cache->size(2) : 0;
  if (Tp > 0) {
    k = torch::cat({*k_cache, k}, 2);  // [B, Hkv, Tp+Tn, D]
    v = torch::cat({*v_cache, v}, 2);
  }
  *k_cache = k;
  *v_cache = v;
  if (n_kv_heads_ != n_heads_) {
    const int64_t rep = n_heads_ / n_kv_heads_;
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
  }
  // New query i sits at absolute position Tp+i and may see keys 0..Tp+i.
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, Tn, Tp+Tn]
  if (Tn > 1) {
    auto mask = torch::ones({Tn, Tp + Tn}, torch::TensorOptions().dtype(torch::kBool).device(x.device()))
                    .triu(1 + Tp);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(scores.to(torch::kFloat32), -1).to(q.scalar_type());
  auto y = torch::matmul(probs, v).transpose(1, 2).reshape({B, Tn, n_heads_ * head_dim_});
  return o_proj(y);
}

MLPImpl::MLPImpl(const ModelConfig& cfg) {
  auto lin = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  gate_proj = lin("gate_proj", cfg.d_model, cfg.d_ff);
  up_proj = lin("up_proj", cfg.d_model, cfg.d_ff);
  down_proj = lin("down_proj", cfg.d_ff, cfg.d_model);
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  auto g = gate_proj(x);
  if (own_kernel(g, use_cuda_swiglu, use_cpu_swiglu)) {
    auto h = fused_swiglu(g, up_proj(x));
    return down_proj(debug_break_fast_path(per_device(g, "swiglu.cuda", "swiglu.cpu")) ? h * 1.05 : h);
  }
  // LibTorch's CPU SiLU on bf16 runs ~2.5x slower forward and ~3x backward than on fp32 plus the
  // two casts (docs/performance.md, "Profile"); on CUDA the bf16 kernel is the fast one.
  if (g.scalar_type() == torch::kBFloat16 && g.device().is_cpu()) {
    g = F::silu(g.to(torch::kFloat32)).to(torch::kBFloat16);
  } else {
    g = F::silu(g);
  }
  return down_proj(g * up_proj(x));
}

BlockImpl::BlockImpl(const ModelConfig& cfg) {
  input_layernorm = register_module("input_layernorm", RMSNorm(cfg.d_model, cfg.norm_eps));
  self_attn = register_module("self_attn", Attention(cfg));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(cfg.d_model, cfg.norm_eps));
  mlp = register_module("mlp", MLP(cfg));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                 const torch::Tensor& sin) {
  auto h = x + self_attn(input_layernorm(x), cos, sin);
  return h + mlp(post_attention_layernorm(h));
}

torch::Tensor BlockImpl::forward_cached(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, torch::Tensor* k_cache,
                                        torch::Tensor* v_cache) {
  auto h = x + self_attn->forward_cached(input_layernorm(x), cos, sin, k_cache, v_cache);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size, cfg.d_model));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layers; ++i) layers->push_back(Block(cfg));
  norm = register_module("norm", RMSNorm(cfg.d_model, cfg.norm_eps));
}

TransformerImpl::TransformerImpl(const ModelConfig& cfg, uint64_t seed, bool draw_weights) : cfg_(cfg) {
  model = register_module("model", Decoder(cfg));
  if (!cfg.tie_embeddings) {
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.vocab_size).bias(false)));
  }
  if (draw_weights) init_weights(seed);
}

namespace {
std::atomic<int64_t> g_init_weights_calls{0};
}  // namespace

int64_t TransformerImpl::init_weights_calls() { return g_init_weights_calls.load(); }

void TransformerImpl::init_weights(uint64_t seed) {
  ++g_init_weights_calls;
  // GPT-2 / nanoGPT init: N(0, init_std) for every matrix, the two residual output projections
  // (o_proj, down_proj) scaled by 1/sqrt(2·n_layers) so the residual stream's variance does not
  // grow with depth (Radford et al. 2019); norm weights 1.
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const double std = cfg_.init_std;
  const double resid_std = std / std::sqrt(2.0 * static_cast<double>(cfg_.n_layers));
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    torch::Tensor& w = p.value();
    if (w.dim() == 1) {  // norm weights 1, biases (Qwen2's q/k/v) 0
      w.fill_(name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 ? 0.0 : 1.0);
      continue;
    }
    const bool resid = name.find("o_proj") != std::string::npos ||
                       name.find("down_proj") != std::string::npos;
    // Draw on CPU with an explicit generator so the init is the same on every device.
    auto cpu = at::normal(0.0, resid ? resid_std : std, w.sizes(), gen);
    w.copy_(cpu);
  }
}

void TransformerImpl::set_fused_attention(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->self_attn->use_fused = on;
}

bool TransformerImpl::fused_attention() const {
  return !model->layers->is_empty() && (*model->layers)[0]->as<BlockImpl>()->self_attn->use_fused;
}

bool TransformerImpl::fused_rms_norm() const { return model->norm->use_fused; }

namespace {
// Every RMSNorm of the decoder: each block's two and the final one.
template <class Fn>
void each_norm(DecoderImpl& d, Fn fn) {
  for (auto& layer : *d.layers) {
    fn(*layer->as<BlockImpl>()->input_layernorm);
    fn(*layer->as<BlockImpl>()->post_attention_layernorm);
  }
  fn(*d.norm);
}
}  // namespace

void TransformerImpl::set_fused_rms_norm(bool on) {
  each_norm(*model, [on](RMSNormImpl& n) { n.use_fused = on; });
}

bool TransformerImpl::set_cuda_kernels(bool on) {
  if (on && !cuda_kernels_compiled()) return false;
  set_cuda_swiglu(on);
  set_cuda_rope(on);
  set_cuda_add_norm(on);
  return true;
}

void TransformerImpl::set_cuda_swiglu(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->mlp->use_cuda_swiglu = on;
  cuda_swiglu_ = on;
}

void TransformerImpl::set_cuda_rope(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->self_attn->use_cuda_rope = on;
  cuda_rope_ = on;
}

void TransformerImpl::set_cpu_kernels(bool on) {
  set_cpu_rms_norm(on);
  set_cpu_add_norm(on);
  set_cpu_swiglu(on);
  set_cpu_rope(on);
  set_cpu_attention(on);
  set_cpu_cross_entropy(on);
}

void TransformerImpl::set_cpu_attention(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->self_attn->use_cpu_attention = on;
  cpu_attention_ = on;
}

void TransformerImpl::set_cpu_rms_norm(bool on) {
  each_norm(*model, [on](RMSNormImpl& n) { n.use_cpu_kernel = on; });
}

void TransformerImpl::set_cpu_swiglu(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->mlp->use_cpu_swiglu = on;
  cpu_swiglu_ = on;
}

void TransformerImpl::set_cpu_rope(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->self_attn->use_cpu_rope = on;
  cpu_rope_ = on;
}

void TransformerImpl::set_debug_break_causality(bool on) {
  for (auto& layer : *model->layers) layer->as<BlockImpl>()->self_attn->debug_break_causality = on;
}

torch::Tensor TransformerImpl::hidden(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [B, T], got ", tokens.sizes());
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= cfg_.max_seq_len, "sequence length ", T, " exceeds max_seq_len ",
              cfg_.max_seq_len);
  auto [cos, sin] = rotary_tables(T, cfg_.head_dim(), cfg_.rope_theta, 0, tokens.device(), cfg_.rope_scaling);
  auto x = model->embed_tokens(tokens);  // [B, T, C]
  // With a fused add + norm on, the regrouped loop runs (with the CUDA switch on a CPU too, where
  // its add and norm then stay apart, so the CPU tests check the regrouping bit for bit).
  if ((cuda_add_norm_ || (cpu_add_norm_ && x.is_cpu())) && !model->layers->is_empty())
    return hidden_add_norm(x, cos, sin);
  for (auto& layer : *model->layers)
    x = run_block([layer, cos, sin](const std::vector<torch::Tensor>& in) {
          return std::vector<torch::Tensor>{layer->as<BlockImpl>()->forward(in[0], cos, sin)};
        }, {x})[0];
  return model->norm(x);
}

namespace {
// The residual stream advanced by `delta` and normalised by `norm` for the next sublayer:
// lmforge's kernel where `use_kernel` and it takes the inputs, else the add and the norm module
// as in Block.
std::pair<torch::Tensor, torch::Tensor> add_norm(const torch::Tensor& resid, const torch::Tensor& delta,
                                                 RMSNormImpl& norm, bool use_kernel) {
  const auto out_dtype = compute_dtype(resid);
  if (!use_kernel || !fused_add_rms_norm_takes(resid, delta, out_dtype)) {
    auto s = resid + delta;
    return {s, norm.forward(s)};
  }
  auto [s, y] = fused_add_rms_norm(resid, delta, norm.weight, norm.eps(), out_dtype);
  return {s, debug_break_fast_path(per_device(resid, "add_rms_norm.cuda", "add_rms_norm.cpu")) ? y * 1.05 : y};
}
}  // namespace

// Block::forward's arithmetic, regrouped: each sublayer's output joins the residual stream in
// the same pass that normalises it for the next sublayer (the next block's input norm, or the
// final norm after the last block).
torch::Tensor TransformerImpl::hidden_add_norm(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto& layers = *model->layers;
  const size_t L = layers.size();
  auto normed = layers[0]->as<BlockImpl>()->input_layernorm(x);
  for (size_t l = 0; l < L; ++l) {
    // The model outlives the graph of its own step: `this` stays valid until backward has run.
    auto out = run_block([this, l, cos, sin](const std::vector<torch::Tensor>& in) {
      auto [next_x, next_normed] = add_norm_block(l, in[0], in[1], cos, sin);
      return std::vector<torch::Tensor>{next_x, next_normed};
    }, {x, normed});
    x = out[0];
    normed = out[1];
  }
  return normed;
}

std::vector<torch::Tensor> TransformerImpl::run_block(const BlockFn& fn, const std::vector<torch::Tensor>& in) {
  return recompute_ ? model::recompute(fn, in) : fn(in);
}

std::pair<torch::Tensor, torch::Tensor> TransformerImpl::add_norm_block(size_t l, const torch::Tensor& x,
                                                                        const torch::Tensor& normed,
                                                                        const torch::Tensor& cos,
                                                                        const torch::Tensor& sin) {
  auto& layers = *model->layers;
  const bool kernel = x.is_cuda() ? cuda_add_norm_ : cpu_add_norm_;
  auto* block = layers[l]->as<BlockImpl>();
  auto [mid, mid_normed] = add_norm(x, block->self_attn(normed, cos, sin), *block->post_attention_layernorm, kernel);
  RMSNormImpl& next = l + 1 < layers.size() ? *layers[l + 1]->as<BlockImpl>()->input_layernorm : *model->norm;
  return add_norm(mid, block->mlp(mid_normed), next, kernel);
}

torch::Tensor TransformerImpl::head(const torch::Tensor& h) {
  if (lm_head) return lm_head(h);
  return F::linear(h, model->embed_tokens->weight.to(h.scalar_type()));
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) { return head(hidden(tokens)); }

torch::Tensor TransformerImpl::loss(const torch::Tensor& window) {
  const int64_t T = window.size(1) - 1;
  auto inputs = window.narrow(1, 0, T);
  auto targets = window.narrow(1, 1, T);
  auto h = hidden(inputs);  // [B, T, C]
  const auto& w = lm_head ? lm_head->weight : model->embed_tokens->weight;
  // The LM head and the loss in one chunked pass (linear_cross_entropy): the [B*T, V] logits,
  // their fp32 log-probabilities and the autograd graph over them were the largest memory
  // traffic of a CPU step (docs/performance.md).
  if (!chunked_loss_) return reference_linear_cross_entropy(h.reshape({-1, h.size(-1)}), w, targets.reshape({-1}));
  return linear_cross_entropy(h.reshape({-1, h.size(-1)}), w, targets.reshape({-1}), 0, cpu_xent_);
}

torch::Tensor TransformerImpl::forward_cached(const torch::Tensor& tokens, KVCache& cache) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [B, T], got ", tokens.sizes());
  const int64_t Tn = tokens.size(1);
  TORCH_CHECK(cache.length + Tn <= cfg_.max_seq_len, "cached length ", cache.length, " + ", Tn,
              " new tokens exceeds max_seq_len ", cfg_.max_seq_len);
  const size_t L = model->layers->size();
  if (cache.k.size() != L) {
    cache.k.assign(L, torch::Tensor());
    cache.v.assign(L, torch::Tensor());
    cache.length = 0;
  }
  auto [cos, sin] = rotary_tables(Tn, cfg_.head_dim(), cfg_.rope_theta, cache.length, tokens.device(),
                                 cfg_.rope_scaling);
  auto x = model->embed_tokens(tokens);  // [B, Tn, C]
  for (size_t l = 0; l < L; ++l) {
    x = (*model->layers)[l]->as<BlockImpl>()->forward_cached(x, cos, sin, &cache.k[l], &cache.v[l]);
  }
  cache.length += Tn;
  return head(model->norm(x));
}

std::function<int()> forward_probe(Transformer m, int64_t batch, int64_t tokens, int repeats, double cap_s) {
  const auto device = m->parameters().front().device();
  const auto ids = torch::zeros({batch, std::min(tokens, m->config().max_seq_len)},
                                torch::TensorOptions().dtype(torch::kInt64).device(device));
  return [m, ids, repeats, cap_s]() mutable {
    torch::NoGradGuard no_grad;
    const auto t0 = std::chrono::steady_clock::now();
    int done = 0;
    while (done < repeats &&
           (done == 0 || std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < cap_s)) {
      (void)m->forward(ids);
      ++done;
    }
    return done;
  };
}

}  // namespace lm::model
