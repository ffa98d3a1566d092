#include "train/optim.h"

#include <cmath>
#include <map>

namespace lm::train {

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainConfig& cfg)
    : beta1_(cfg.beta1), beta2_(cfg.beta2), eps_(cfg.eps), weight_decay_(cfg.weight_decay) {
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    const bool is_embedding = name.find("embed_tokens") != std::string::npos;
    const bool decay = p.dim() >= 2 && (!is_embedding || cfg.decay_embeddings);
    (decay ? decayed_ : not_decayed_).push_back(name);
    slots_.push_back({name, p, torch::zeros_like(p, torch::MemoryFormat::Preserve),
                      torch::zeros_like(p, torch::MemoryFormat::Preserve), decay});
  }
}

void AdamW::zero_grad() {
  for (auto& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++t_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  for (auto& s : slots_) {
    const auto& g = s.param.grad();
    if (!g.defined()) continue;
    if (s.decay && weight_decay_ != 0) s.param.mul_(1.0 - lr * weight_decay_);
    s.exp_avg.mul_(beta1_).add_(g, 1.0 - beta1_);
    s.exp_avg_sq.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    auto denom = (s.exp_avg_sq.sqrt() / bc2_sqrt).add_(eps_);
    s.param.addcdiv_(s.exp_avg, denom, -step_size);
  }
}

model::NamedTensors AdamW::state() const {
  model::NamedTensors out;
  out.emplace_back("__step__", torch::tensor({t_}, torch::kInt64));
  for (const auto& s : slots_) {
    out.emplace_back(s.name + ".exp_avg", s.exp_avg);
    out.emplace_back(s.name + ".exp_avg_sq", s.exp_avg_sq);
  }
  return out;
}

absl::Status AdamW::load_state(const model::NamedTensors& state, const std::string& source) {
  std::map<std::string, torch::Tensor> m(state.begin(), state.end());
  auto it = m.find("__step__");
  if (it == m.end()) return absl::DataLossError(source + ": no __step__ tensor (not an lmforge optimizer state)");
  torch::NoGradGuard no_grad;
  for (auto& s : slots_) {
    for (auto* pair : {&s.exp_avg, &s.exp_avg_sq}) {
      const std::string key = s.name + (pair == &s.exp_avg ? ".exp_avg" : ".exp_avg_sq");
      auto f = m.find(key);
      if (f == m.end()) return absl::DataLossError(source + ": missing " + key);
      if (f->second.sizes() != pair->sizes())
        return absl::FailedPreconditionError(source + ": " + key + " has another shape (other preset?)");
      pair->copy_(f->second);
    }
  }
  t_ = it->second.item<int64_t>();
  return absl::OkStatus();
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().to(torch::kFloat32).norm(2));
  }
  if (norms.empty()) return 0.0;
  const double total = torch::stack(norms).norm(2).item<double>();
  if (max_norm > 0 && std::isfinite(total) && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (const auto& p : params) {
      if (p.grad().defined()) p.grad().mul_(scale);
    }
  }
  return total;
}

}  // namespace lm::train
