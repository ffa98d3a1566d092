#include "train/optim.h"

#include <cmath>
#include <map>

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_fused_adamw.h>

namespace lm::train {

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainConfig& cfg)
    : beta1_(cfg.optimizer.beta1), beta2_(cfg.optimizer.beta2), eps_(cfg.optimizer.eps), weight_decay_(cfg.optimizer.weight_decay) {
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    const bool is_embedding = name.find("embed_tokens") != std::string::npos;
    const bool decay = p.dim() >= 2 && (!is_embedding || cfg.optimizer.decay_embeddings);
    (decay ? decayed_ : not_decayed_).push_back(name);
    slots_.push_back({name, p, torch::zeros_like(p, torch::MemoryFormat::Preserve),
                      torch::zeros_like(p, torch::MemoryFormat::Preserve), decay});
    step_tensor(p.device());
  }
}

void AdamW::zero_grad() {
  for (auto& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();
  }
}

torch::Tensor& AdamW::step_tensor(const torch::Device& device) {
  auto& step = step_tensors_[device.str()];
  if (!step.defined())
    step = torch::full({}, static_cast<double>(loaded_t_), torch::TensorOptions().dtype(torch::kFloat32).device(device));
  return step;
}

void AdamW::step(double lr, const torch::Tensor& found_inf) {
  TORCH_CHECK(lr >= 0, "AdamW::step: learning rate ", lr, " < 0");
  update(lr, found_inf);
}

void AdamW::set_lr(double lr) {
  for (const auto& s : slots_) {
    auto& t = lr_tensors_[s.param.device().str()];
    if (!t.defined()) t = torch::empty({}, torch::TensorOptions().dtype(torch::kFloat32).device(s.param.device()));
  }
  for (auto& [dev, t] : lr_tensors_) t.fill_(lr);
}

void AdamW::step_device_lr(const torch::Tensor& found_inf) {
  TORCH_CHECK(!lr_tensors_.empty(), "AdamW::step_device_lr before set_lr");
  update(-1.0, found_inf);
}

void AdamW::update(double lr, const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  // Bias correction reads state_steps, which the kernel does not advance (torch.optim adds 1
  // before calling it and subtracts found_inf after): every slot shares the run's step count, so
  // one step tensor per device is advanced by 1 - found_inf on the device and passed for each
  // parameter. Integers below 2^24 are exact in float32, so this equals filling in t.
  for (auto& [dev, step] : step_tensors_) {
    if (found_inf.defined()) step.add_(1.0 - found_inf.to(step.device()));
    else step.add_(1.0);
  }
  // ATen's fused AdamW (one kernel over all tensors of a group on CUDA, a vectorised loop on CPU),
  // the kernel behind torch.optim.AdamW(fused=True): decayed and undecayed groups in two calls.
  for (const bool decay : {true, false}) {
    std::vector<torch::Tensor> p, g, m, v, steps;
    for (auto& s : slots_) {
      if (s.decay != decay || !s.param.grad().defined()) continue;
      auto& step = step_tensors_.at(s.param.device().str());
      p.push_back(s.param);
      g.push_back(s.param.grad());
      m.push_back(s.exp_avg);
      v.push_back(s.exp_avg_sq);
      steps.push_back(step);
    }
    if (p.empty()) continue;
    std::optional<at::Tensor> inf;
    if (found_inf.defined()) inf = found_inf.to(p.front().device(), torch::kFloat32);
    const double wd = decay ? weight_decay_ : 0.0;
    if (lr >= 0)
      at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, beta1_, beta2_, wd, eps_, /*amsgrad=*/false,
                        /*maximize=*/false, /*grad_scale=*/std::nullopt, inf);
    else
      at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, lr_tensors_.at(p.front().device().str()), beta1_,
                        beta2_, wd, eps_, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, inf);
  }
}

int64_t AdamW::steps_taken() const {
  if (step_tensors_.empty()) return loaded_t_;
  return static_cast<int64_t>(step_tensors_.begin()->second.item<double>());
}

model::NamedTensors AdamW::state() const {
  model::NamedTensors out;
  out.emplace_back("__step__", torch::tensor({steps_taken()}, torch::kInt64));
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
  loaded_t_ = it->second.item<int64_t>();
  for (auto& [dev, step] : step_tensors_) step.fill_(static_cast<double>(loaded_t_));
  return absl::OkStatus();
}

GradNorm clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  std::vector<int64_t> index;  // grads[i] belongs to params[index[i]]
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    grads.push_back(params[i].grad());
    index.push_back(static_cast<int64_t>(i));
  }
  if (grads.empty()) return {torch::zeros({}, torch::kFloat32), torch::full({}, -1, torch::kInt64), {}};
  // One norm per tensor (a multi-tensor kernel on CUDA), then the norm of the norms: the order
  // of torch.nn.utils.clip_grad_norm_.
  auto norms = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat32);  // [n]
  auto total = norms.norm(2);
  // A tensor's norm is non-finite iff one of its elements is: the first bad index from the
  // norms already computed, on the device.
  auto bad = norms.isfinite().logical_not();
  auto first_bad = torch::where(bad.any(), bad.to(torch::kInt32).argmax(), -1);  // argmax: the first maximum
  if (max_norm > 0) {
    // reciprocal * max_norm: the arithmetic of Python's max_norm / (total + 1e-6) (Tensor.__rtruediv__).
    auto coef = torch::clamp_max((total + 1e-6).reciprocal() * max_norm, 1.0);
    at::_foreach_mul_(grads, coef);
  }
  return {total, first_bad, std::move(index)};
}

}  // namespace lm::train
