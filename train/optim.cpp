#include "train/optim.h"

#include <cmath>
#include <map>

#include <ATen/ops/_fused_adamw.h>

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
  // ATen's fused AdamW (one kernel over all tensors of a group on CUDA, a vectorised loop on CPU),
  // the kernel behind torch.optim.AdamW(fused=True): decayed and undecayed groups in two calls.
  // Bias correction reads state_steps, which the kernel does not advance (torch.optim adds 1
  // before calling it); every slot shares the run's step count t_, so one step tensor per device
  // is filled with it and passed for each parameter.
  for (const bool decay : {true, false}) {
    std::vector<torch::Tensor> p, g, m, v, steps;
    for (auto& s : slots_) {
      if (s.decay != decay || !s.param.grad().defined()) continue;
      auto& step = step_tensors_[s.param.device().str()];
      if (!step.defined()) step = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(s.param.device()));
      p.push_back(s.param);
      g.push_back(s.param.grad());
      m.push_back(s.exp_avg);
      v.push_back(s.exp_avg_sq);
      steps.push_back(step);
    }
    if (p.empty()) continue;
    for (auto& [dev, step] : step_tensors_) step.fill_(static_cast<double>(t_));
    at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, beta1_, beta2_,
                      decay ? weight_decay_ : 0.0, eps_, /*amsgrad=*/false, /*maximize=*/false);
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
