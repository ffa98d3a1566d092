#include "model/verify.h"

#include <cmath>
#include <tuple>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/fused_ops.h"
#include "model/kernels/cpu_kernels.h"

namespace lm::model {
namespace {

torch::Tensor random_tokens(int64_t batch, int64_t len, int64_t vocab, uint64_t seed,
                            torch::Device device) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randint(vocab, {batch, len}, gen, torch::TensorOptions().dtype(torch::kInt64))
      .to(device);
}

torch::Device model_device(Transformer& model) { return model->parameters().front().device(); }

}  // namespace

std::string GradFlowReport::summary() const {
  if (ok()) return absl::StrFormat("gradient flow: ok (%d parameters, loss %.4f)", checked, loss);
  std::string s = absl::StrFormat("gradient flow: FAILED (%d parameters checked)", checked);
  if (!missing.empty()) s += "\n  no gradient: " + absl::StrJoin(missing, ", ");
  if (!zero.empty()) s += "\n  zero gradient: " + absl::StrJoin(zero, ", ");
  if (!nonfinite.empty()) s += "\n  NaN/Inf gradient: " + absl::StrJoin(nonfinite, ", ");
  return s;
}

GradFlowReport check_gradient_flow(Transformer& model, int64_t batch, int64_t seq, uint64_t seed) {
  GradFlowReport r;
  model->zero_grad();
  auto window = random_tokens(batch, seq + 1, model->config().vocab_size, seed, model_device(model));
  auto loss = model->loss(window);
  r.loss = loss.item<double>();
  loss.backward();
  for (const auto& p : model->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    ++r.checked;
    const auto& g = p.value().grad();
    if (!g.defined()) {
      r.missing.push_back(p.key());
    } else if (!torch::isfinite(g).all().item<bool>()) {
      r.nonfinite.push_back(p.key());
    } else if (g.abs().max().item<double>() == 0.0) {
      r.zero.push_back(p.key());
    }
  }
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  return r;
}

double attention_tolerance(torch::ScalarType dtype) {
  if (dtype == torch::kBFloat16) return 2e-2;
  if (dtype == torch::kFloat16) return 5e-3;
  return 1e-5;
}

std::string EquivalenceReport::summary() const {
  return absl::StrFormat("attention fused vs reference: %s (rel. |Δout| %.2e, |Δgrad| %.2e, tol %.0e)",
                         ok() ? "ok" : "FAILED", out_err, grad_err, tolerance);
}

namespace {
double rel_err(const torch::Tensor& a, const torch::Tensor& b);
}  // namespace

EquivalenceReport check_attention_equivalence(int64_t batch, int64_t heads, int64_t seq,
                                              int64_t head_dim, torch::ScalarType dtype,
                                              torch::Device device, uint64_t seed,
                                              int64_t kv_heads) {
  EquivalenceReport r;
  if (kv_heads <= 0) kv_heads = heads;
  r.tolerance = attention_tolerance(dtype);
  auto gen = at::detail::createCPUGenerator(seed);
  auto make = [&](int64_t h) {
    return at::randn({batch, h, seq, head_dim}, gen, torch::TensorOptions())
        .to(device, dtype)
        .set_requires_grad(true);
  };
  auto q = make(heads), k = make(kv_heads), v = make(kv_heads);
  auto upstream = at::randn({batch, heads, seq, head_dim}, gen, torch::TensorOptions()).to(device, dtype);
  auto run = [&](bool fused) {
    const int64_t rep = heads / kv_heads;
    auto out = fused ? fused_attention(q, k, v)
                     : reference_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), true);
    auto grads = torch::autograd::grad({out}, {q, k, v}, {upstream});
    return std::make_pair(out.detach(), grads);
  };
  auto [o_ref, g_ref] = run(false);
  auto [o_fused, g_fused] = run(true);
  r.out_err = rel_err(o_fused, o_ref);
  for (size_t i = 0; i < 3; ++i) r.grad_err = std::max(r.grad_err, rel_err(g_fused[i], g_ref[i]));
  return r;
}

double fast_path_tolerance(torch::ScalarType dtype) {
  if (dtype == torch::kBFloat16 || dtype == torch::kFloat16) return 2e-2;
  return 1e-5;
}

std::string FastPathCheck::summary() const {
  return absl::StrFormat("fast path %s: %s (%s; rel. |Δout| %.2e, |Δgrad| %.2e, tol %.0e)", name,
                         ok() ? "ok" : "MISMATCH", what, out_err, grad_err, tolerance);
}

std::string FastPathReport::summary() const {
  std::string s;
  for (const auto& c : checks) s += (s.empty() ? "" : "\n") + c.summary();
  for (const auto& n : notes) s += "\n" + n;
  if (!fell_back.empty())
    s += "\nfast paths FAILED on this device, training with their reference instead (slower, correct): " +
         absl::StrJoin(fell_back, ", ");
  if (!error.empty()) s += "\nnot training: " + error;
  return s;
}

namespace {

// max |a - b| / max |b| in fp32 (0 when b is all zero and a equals it).
double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  auto af = a.to(torch::kFloat32), bf = b.to(torch::kFloat32);
  const double scale = bf.abs().max().item<double>();
  const double diff = (af - bf).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

// Runs `fn(fast)` for fast = false, true on leaf inputs, backward with a fixed upstream gradient,
// and compares the outputs and the inputs' gradients.
FastPathCheck compare(const std::string& name, const std::string& what, torch::ScalarType dtype,
                      const std::vector<torch::Tensor>& inputs, const torch::Tensor& upstream,
                      const std::function<torch::Tensor(bool, const std::vector<torch::Tensor>&)>& fn) {
  FastPathCheck c{name, what, 0, 0, fast_path_tolerance(dtype)};
  auto run = [&](bool fast) {
    std::vector<torch::Tensor> in;
    for (const auto& x : inputs) in.push_back(x.detach().clone().set_requires_grad(x.requires_grad()));
    auto out = fn(fast, in);
    std::vector<torch::Tensor> leaves;
    for (const auto& x : in) if (x.requires_grad()) leaves.push_back(x);
    auto grads = torch::autograd::grad({out}, leaves, {upstream.defined() ? upstream : torch::ones_like(out)});
    return std::make_pair(out.detach(), grads);
  };
  auto [o_ref, g_ref] = run(false);
  auto [o_fast, g_fast] = run(true);
  c.out_err = rel_err(o_fast, o_ref);
  for (size_t i = 0; i < g_ref.size(); ++i) c.grad_err = std::max(c.grad_err, rel_err(g_fast[i], g_ref[i]));
  return c;
}

torch::Tensor rand_input(std::vector<int64_t> shape, at::Generator& gen, torch::Device device, torch::ScalarType dt,
                    double scale = 1.0) {
  return (at::randn(shape, gen, torch::TensorOptions()) * scale).to(device, dt);
}

// The shape the checks run at: B = 2, T = 64 at start-up; the run's own micro-batch in the second
// pass (verify_fast_paths with a RunShape), where `run` makes the attention check compare on the
// batch's first row only (the reference's [B, H, T, T] scores are what does not fit).
struct CheckShape {
  int64_t batch = 2, seq = 64;
  bool run = false;
};
thread_local CheckShape t_shape;
int64_t check_batch() { return t_shape.batch; }
int64_t check_seq() { return t_shape.seq; }
class ShapeScope {
 public:
  explicit ShapeScope(CheckShape s) : saved_(t_shape) { t_shape = s; }
  ~ShapeScope() { t_shape = saved_; }

 private:
  CheckShape saved_;
};

// SDPA against the reference: forward and backward. In the run's pass SDPA runs forward and
// backward on the whole batch, and both sides are compared on row 0.
FastPathCheck check_attention(Transformer& m, torch::Device device, torch::ScalarType dt, uint64_t seed) {
  const auto& cfg = m->config();
  const int64_t B = check_batch(), H = cfg.n_heads, Hkv = cfg.n_kv_heads, D = cfg.head_dim();
  const int64_t T = std::min<int64_t>(cfg.max_seq_len, check_seq());
  const bool row0 = t_shape.run;
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<torch::Tensor> in = {rand_input({B, H, T, D}, gen, device, dt), rand_input({B, Hkv, T, D}, gen, device, dt),
                                   rand_input({B, Hkv, T, D}, gen, device, dt)};
  for (auto& x : in) x.set_requires_grad(true);
  auto up = rand_input({row0 ? 1 : B, H, T, D}, gen, device, dt);
  return compare("attention.sdpa",
                 absl::StrFormat("scaled_dot_product_attention%s vs matmul-softmax-matmul%s",
                                 Hkv != H ? " (native GQA)" : "", row0 ? absl::StrFormat(" at %d x %d (row 0)", B, T) : ""),
                 dt, in, up, [&](bool fast, const std::vector<torch::Tensor>& x) {
                   if (fast) {
                     auto y = fused_attention(x[0], x[1], x[2]);
                     return row0 ? y.narrow(0, 0, 1) : y;
                   }
                   const int64_t rep = H / Hkv, n = row0 ? 1 : B;
                   return reference_attention(x[0].narrow(0, 0, n), x[1].narrow(0, 0, n).repeat_interleave(rep, 1),
                                              x[2].narrow(0, 0, n).repeat_interleave(rep, 1), true);
                 });
}

// lmforge's CPU attention (ATen's flash forward, our backward) against matmul-softmax-matmul.
FastPathCheck check_cpu_attention(Transformer& m, torch::Device device, torch::ScalarType dt, uint64_t seed) {
  const auto& cfg = m->config();
  const int64_t H = cfg.n_heads, D = cfg.head_dim();
  // Three causal row blocks of the fp32 kernel, the last one partial (where the model allows).
  const int64_t T = std::min<int64_t>(cfg.max_seq_len, 2 * kernels::cpu::kAttentionRowBlock + 5);
  auto gen = at::detail::createCPUGenerator(seed);
  // q, k, v as the model gives them: [B, H, T, D] views of [B, T, H, D] storage.
  auto qkv = [&] { return rand_input({check_batch(), T, H, D}, gen, device, dt).transpose(1, 2); };
  std::vector<torch::Tensor> in = {qkv(), qkv(), qkv()};
  for (auto& x : in) x.set_requires_grad(true);
  auto up = rand_input({check_batch(), H, T, D}, gen, device, dt);
  return compare("attention.cpu", "lmforge's CPU attention (bf16: its backward; fp32: both passes) vs matmul-softmax-matmul", dt,
                 in, up, [&](bool fast, const std::vector<torch::Tensor>& x) {
                   if (!fast) return reference_attention(x[0], x[1], x[2], true);
                   auto y = cpu_causal_attention(x[0], x[1], x[2]);
                   return debug_break_fast_path("attention.cpu") ? y * 1.05 : y;
                 });
}

// RMSNorm's fast path (ATen's rms_norm, "rms_norm.aten", or lmforge's CPU kernel, "rms_norm.cpu")
// against the fp32 reference.
FastPathCheck check_rms_norm_path(const std::string& name, Transformer& m, torch::Device device, torch::ScalarType dt,
                                  uint64_t seed) {
  const auto& cfg = m->config();
  auto gen = at::detail::createCPUGenerator(seed);
  // The residual stream is fp32 under autocast; the output (and its gradient) in the compute dtype.
  std::vector<torch::Tensor> in = {rand_input({check_batch(), check_seq(), cfg.d_model}, gen, device, torch::kFloat32),
                                   (1.0 + rand_input({cfg.d_model}, gen, device, torch::kFloat32, 0.1))};
  for (auto& x : in) x.set_requires_grad(true);
  auto up = rand_input({check_batch(), check_seq(), cfg.d_model}, gen, device, dt);
  const double eps = cfg.norm_eps;
  const bool own = name == "rms_norm.cpu";
  return compare(name,
                 std::string(own ? "lmforge's CPU RMSNorm kernel" : "at::rms_norm") +
                     " vs fp32 x * rsqrt(mean(x^2) + eps) * w",
                 dt, in, up, [&](bool fast, const std::vector<torch::Tensor>& x) {
                   if (!fast) return reference_rms_norm(x[0], x[1], eps).to(dt);
                   if (!own) return fused_rms_norm(x[0], x[1], eps).to(dt);  // the compute dtype, emulated by a cast
                   auto y = cpu_fused_rms_norm(x[0], x[1], eps, dt);
                   return debug_break_fast_path("rms_norm.cpu") ? y * 1.05 : y;
                 });
}

FastPathCheck check_rms_norm(Transformer& m, torch::Device device, torch::ScalarType dt, uint64_t seed) {
  return check_rms_norm_path("rms_norm.aten", m, device, dt, seed);
}

// The chunked loss (with lmforge's CPU row kernel inside when `cpu_kernel`) against the reference.
FastPathCheck check_chunked_loss_with(const std::string& name, bool cpu_kernel, Transformer& m, torch::Device device,
                                      torch::ScalarType dt, uint64_t seed) {
  const auto& cfg = m->config();
  auto gen = at::detail::createCPUGenerator(seed);
  const int64_t N = 2 * 64;  // the loss: fixed-size chunks, whatever the run's batch
  std::vector<torch::Tensor> in = {rand_input({N, cfg.d_model}, gen, device, dt),
                                   rand_input({cfg.vocab_size, cfg.d_model}, gen, device, dt, 0.05)};
  for (auto& x : in) x.set_requires_grad(true);
  auto targets = at::randint(cfg.vocab_size, {N}, gen, torch::TensorOptions().dtype(torch::kInt64)).to(device);
  // Several chunks and a partial last one, as a long sequence would have.
  const int64_t chunk = N / 3;
  return compare(name,
                 cpu_kernel ? "chunked linear_cross_entropy with lmforge's CPU softmax cross-entropy rows vs "
                              "nll_loss(log_softmax(h wT))"
                            : "chunked linear_cross_entropy vs nll_loss(log_softmax(h wT))",
                 dt, in, {}, [&](bool fast, const std::vector<torch::Tensor>& x) {
                   return fast ? linear_cross_entropy(x[0], x[1], targets, chunk, cpu_kernel)
                               : reference_linear_cross_entropy(x[0], x[1], targets);
                 });
}

FastPathCheck check_chunked_loss(Transformer& m, torch::Device device, torch::ScalarType dt, uint64_t seed) {
  return check_chunked_loss_with("loss.chunked", false, m, device, dt, seed);
}

FastPathCheck check_cpu_cross_entropy(Transformer& m, torch::Device device, torch::ScalarType dt, uint64_t seed) {
  return check_chunked_loss_with("cross_entropy.cpu", true, m, device, dt, seed);
}

// lmforge's own kernels, one wrapper for CUDA and CPU: `name` is the registry entry checked.
FastPathCheck check_own_swiglu(const std::string& name, Transformer& m, torch::Device device, torch::ScalarType dt,
                               uint64_t seed) {
  const auto& cfg = m->config();
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<torch::Tensor> in = {rand_input({check_batch(), check_seq(), cfg.d_ff}, gen, device, dt),
                                   rand_input({check_batch(), check_seq(), cfg.d_ff}, gen, device, dt)};
  for (auto& x : in) x.set_requires_grad(true);
  auto up = rand_input({check_batch(), check_seq(), cfg.d_ff}, gen, device, dt);
  return compare(name, "lmforge's SwiGLU kernel vs F::silu(a) * b", dt, in, up,
                 [&](bool fast, const std::vector<torch::Tensor>& x) {
                   if (!fast) return torch::nn::functional::silu(x[0]) * x[1];
                   auto y = fused_swiglu(x[0], x[1]);
                   return debug_break_fast_path(name.c_str()) ? y * 1.05 : y;
                 });
}

FastPathCheck check_own_rope(const std::string& name, Transformer& m, torch::Device device, torch::ScalarType dt,
                             uint64_t seed) {
  const auto& cfg = m->config();
  const int64_t H = cfg.n_heads, Hkv = cfg.n_kv_heads, D = cfg.head_dim();
  const int64_t T = std::min<int64_t>(cfg.max_seq_len, check_seq());
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<torch::Tensor> in = {rand_input({check_batch(), T, H, D}, gen, device, dt), rand_input({check_batch(), T, Hkv, D}, gen, device, dt)};
  for (auto& x : in) x.set_requires_grad(true);
  auto [cos, sin] = rotary_tables(T, D, cfg.rope_theta, 0, device, cfg.rope_scaling);  // the model's own tables
  return compare(name, "lmforge's rotary kernel (q and k in one pass) vs apply_rotary", dt, in, {},
                 [&](bool fast, const std::vector<torch::Tensor>& x) {
                   if (!fast)  // the model's reference: [B, H, T, D], back to [B, T, H, D] to compare
                     return torch::cat({apply_rotary(x[0].transpose(1, 2), cos, sin).transpose(1, 2).flatten(),
                                        apply_rotary(x[1].transpose(1, 2), cos, sin).transpose(1, 2).flatten()});
                   auto [q, k] = fused_rope(x[0], x[1], cos, sin);
                   auto y = torch::cat({q.flatten(), k.flatten()});
                   return debug_break_fast_path(name.c_str()) ? y * 1.05 : y;
                 });
}


FastPathCheck check_own_add_norm(const std::string& name, Transformer& m, torch::Device device, torch::ScalarType dt,
                                 uint64_t seed) {
  const auto& cfg = m->config();
  auto gen = at::detail::createCPUGenerator(seed);
  // As in the model under autocast: the residual stream in fp32, the sublayer's output and the
  // normalised output in the compute dtype. A gradient reaches both outputs (s feeds the next
  // residual add, y the next sublayer).
  const std::vector<int64_t> shape = {check_batch(), check_seq(), cfg.d_model};
  std::vector<torch::Tensor> in = {rand_input(shape, gen, device, torch::kFloat32), rand_input(shape, gen, device, dt),
                                   (1.0 + rand_input({cfg.d_model}, gen, device, torch::kFloat32, 0.1))};
  for (auto& x : in) x.set_requires_grad(true);
  auto up = rand_input({2 * shape[0] * shape[1] * shape[2]}, gen, device, torch::kFloat32);
  const double eps = cfg.norm_eps;
  return compare(name, "lmforge's residual add + RMSNorm kernel vs x + r, then the fp32 RMSNorm", dt,
                 in, up, [&](bool fast, const std::vector<torch::Tensor>& x) {
                   torch::Tensor s, y;
                   if (fast) {
                     std::tie(s, y) = fused_add_rms_norm(x[0], x[1], x[2], eps, dt);
                     if (debug_break_fast_path(name.c_str())) y = y * 1.05;
                   } else {
                     s = x[0] + x[1];
                     y = reference_rms_norm(s, x[2], eps).to(dt);
                   }
                   return torch::cat({s.flatten().to(torch::kFloat32), y.flatten().to(torch::kFloat32)});
                 });
}

// The check of `fn` (one of the check_own_* above) under the registry name `name`.
template <class Fn>
std::function<FastPathCheck(Transformer&, torch::Device, torch::ScalarType, uint64_t)> named(std::string name, Fn fn) {
  return [name, fn](Transformer& m, torch::Device d, torch::ScalarType dt, uint64_t seed) {
    return fn(name, m, d, dt, seed);
  };
}

}  // namespace

const std::vector<FastPath>& fast_paths() {
  static const std::vector<FastPath> registry = {
      {"attention.sdpa", [](Transformer& m, torch::Device, torch::ScalarType) { return m->fused_attention(); },
       check_attention, [](Transformer& m) { m->set_fused_attention(false); }},
      {"rms_norm.aten", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cuda() && m->fused_rms_norm(); }, check_rms_norm,
       [](Transformer& m) { m->set_fused_rms_norm(false); }},
      {"loss.chunked", [](Transformer& m, torch::Device, torch::ScalarType) { return m->chunked_loss(); }, check_chunked_loss,
       [](Transformer& m) { m->set_chunked_loss(false); }},
      {"swiglu.cuda", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cuda() && m->cuda_swiglu(); },
       named("swiglu.cuda", check_own_swiglu), [](Transformer& m) { m->set_cuda_swiglu(false); }},
      {"rope.cuda", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cuda() && m->cuda_rope(); },
       named("rope.cuda", check_own_rope), [](Transformer& m) { m->set_cuda_rope(false); }},
      {"add_rms_norm.cuda", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cuda() && m->cuda_add_norm(); },
       named("add_rms_norm.cuda", check_own_add_norm), [](Transformer& m) { m->set_cuda_add_norm(false); }},
      // lmforge's own CPU kernels (issue 32): on by default, so every CPU start-up checks them.
      {"rms_norm.cpu", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cpu() && m->cpu_rms_norm(); },
       named("rms_norm.cpu", check_rms_norm_path), [](Transformer& m) { m->set_cpu_rms_norm(false); }},
      {"add_rms_norm.cpu", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cpu() && m->cpu_add_norm(); },
       named("add_rms_norm.cpu", check_own_add_norm), [](Transformer& m) { m->set_cpu_add_norm(false); }},
      {"swiglu.cpu", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cpu() && m->cpu_swiglu(); },
       named("swiglu.cpu", check_own_swiglu), [](Transformer& m) { m->set_cpu_swiglu(false); }},
      {"rope.cpu", [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cpu() && m->cpu_rope(); },
       named("rope.cpu", check_own_rope), [](Transformer& m) { m->set_cpu_rope(false); }},
      {"attention.cpu",
       [](Transformer& m, torch::Device d, torch::ScalarType dt) {
         return d.is_cpu() && m->fused_attention() && m->cpu_attention() && cpu_causal_attention_routes(dt);
       },
       check_cpu_attention, [](Transformer& m) { m->set_cpu_attention(false); }},
      {"cross_entropy.cpu",
       [](Transformer& m, torch::Device d, torch::ScalarType) { return d.is_cpu() && m->chunked_loss() && m->cpu_cross_entropy(); },
       check_cpu_cross_entropy, [](Transformer& m) { m->set_cpu_cross_entropy(false); }},
  };
  return registry;
}

namespace {

// One check, an exception counted as a failure (a kernel that does not run here is a failed path).
FastPathCheck guarded_check(const FastPath& fp, Transformer& model, torch::Device device, torch::ScalarType dtype,
                            uint64_t seed) {
  try {
    return fp.check(model, device, dtype, seed);
  } catch (const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    std::string msg = c10 != nullptr ? c10->what_without_backtrace() : e.what();
    return FastPathCheck{fp.name, "threw: " + msg.substr(0, msg.find('\n')), INFINITY, INFINITY,
                         fast_path_tolerance(dtype)};
  }
}

// The check at the start-up shape, then (when it passed and `run` is given) at the run's own. The
// losses run in fixed-size chunks whatever the batch: their check does not grow with it.
FastPathCheck check_both_shapes(const FastPath& fp, Transformer& model, torch::Device device, torch::ScalarType dtype,
                                uint64_t seed, const RunShape& run) {
  FastPathCheck c = guarded_check(fp, model, device, dtype, seed);
  if (!c.ok() || !run.given() || fp.name == "loss.chunked" || fp.name == "cross_entropy.cpu") return c;
  const ShapeScope scope({run.batch, run.seq, true});
  FastPathCheck at_run = guarded_check(fp, model, device, dtype, seed);
  if (at_run.what.find(" at ") == std::string::npos)
    at_run.what += absl::StrFormat(" at the run's %d x %d", run.batch, run.seq);
  return at_run;
}

}  // namespace

FastPathReport verify_fast_paths(Transformer& model, torch::Device device, torch::ScalarType dtype,
                                 uint64_t seed, RunShape run) {
  FastPathReport r;
  torch::AutoGradMode grad_on(true);
  for (const auto& fp : fast_paths()) {
    if (!fp.used(model, device, dtype)) continue;
    const uint64_t s = seed++;
    FastPathCheck c = check_both_shapes(fp, model, device, dtype, s, run);
    if (!c.ok() && device_usable(device, fp.name, &r) && fp.name == "attention.sdpa")
      c = retry_sdpa_backends(c, device, [&] { return check_both_shapes(fp, model, device, dtype, s, run); }, &r);
    if (!c.ok() && r.error.empty()) {
      fp.fall_back(model);
      r.fell_back.push_back(fp.name);
      if (fp.name == "attention.sdpa" && run.given())
        r.error = reference_attention_misfit(model->config(), dtype, device, run);
    }
    r.checks.push_back(std::move(c));
    if (!r.error.empty()) break;  // nothing more can run, or the run cannot train: stop here
  }
  return r;
}

std::string CausalityReport::summary() const {
  return absl::StrFormat("causality: %s (%d positions, max leak %.3e)", ok() ? "ok" : "FAILED",
                         positions_checked, max_leak);
}

CausalityReport check_causality(Transformer& model, int64_t seq, uint64_t seed) {
  CausalityReport r;
  torch::NoGradGuard no_grad;
  const int64_t vocab = model->config().vocab_size;
  auto tokens = random_tokens(1, seq, vocab, seed, model_device(model));
  auto base = model->forward(tokens);
  for (int64_t t : {int64_t{0}, seq / 3, seq / 2, seq - 2}) {
    if (t < 0 || t + 1 >= seq) continue;
    auto changed = tokens.clone();
    changed.index_put_({0, t + 1}, (changed.index({0, t + 1}) + 1) % vocab);
    auto out = model->forward(changed);
    // Positions 0..t must see nothing of token t+1: bit-identical, not merely close.
    auto leak = (out.narrow(1, 0, t + 1) - base.narrow(1, 0, t + 1)).abs().max().item<double>();
    r.max_leak = std::max(r.max_leak, leak);
    ++r.positions_checked;
  }
  return r;
}

std::string InitLossReport::summary() const {
  return absl::StrFormat("loss at init: %s (%.4f nats, ln(vocab) = %.4f, band ±%.2f)",
                         ok() ? "ok" : "FAILED", loss, expected, band);
}

InitLossReport check_init_loss(Transformer& model, int64_t batch, int64_t seq, uint64_t seed) {
  InitLossReport r;
  torch::NoGradGuard no_grad;
  r.expected = std::log(static_cast<double>(model->config().vocab_size));
  // With N(0, 0.02) weights the logits have a std well below 1, which adds about var/2
  // to ln(V); 0.5 nats admits that and catches a mis-scaled init or a shifted label.
  r.band = 0.5;
  auto window = random_tokens(batch, seq + 1, model->config().vocab_size, seed, model_device(model));
  r.loss = model->loss(window).item<double>();
  return r;
}

}  // namespace lm::model
