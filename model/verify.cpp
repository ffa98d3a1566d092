#include "model/verify.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

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
  return absl::StrFormat("attention fused vs reference: %s (max |Δout| %.2e, max |Δgrad| %.2e, tol %.0e)",
                         ok() ? "ok" : "FAILED", max_abs_out, max_abs_grad, tolerance);
}

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
  r.max_abs_out = (o_ref.to(torch::kFloat32) - o_fused.to(torch::kFloat32)).abs().max().item<double>();
  for (size_t i = 0; i < 3; ++i) {
    r.max_abs_grad = std::max(
        r.max_abs_grad,
        (g_ref[i].to(torch::kFloat32) - g_fused[i].to(torch::kFloat32)).abs().max().item<double>());
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
