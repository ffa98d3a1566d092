#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_fused_adamw.h>

#include "absl/strings/str_cat.h"

namespace lm::train {

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainConfig& cfg,
             const std::vector<ParamPart>* parts)
    : beta1_(cfg.optimizer.beta1), beta2_(cfg.optimizer.beta2), eps_(cfg.optimizer.eps), weight_decay_(cfg.optimizer.weight_decay) {
  TORCH_CHECK(parts == nullptr || parts->size() == params.size(), "AdamW: ", parts ? parts->size() : 0,
              " parts for ", params.size(), " parameters");
  groups_ = cfg.param_groups;
  set_step(0);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    if (!p.requires_grad()) continue;
    const bool is_embedding = name.find("embed_tokens") != std::string::npos;
    const bool decay = p.dim() >= 2 && (!is_embedding || cfg.optimizer.decay_embeddings);
    const int group = static_cast<int>(param_group(name));
    (decay ? decayed_ : not_decayed_).push_back(name);
    Slot s{name, p, {}, {}, decay, group, p, {}, 0};
    if (parts != nullptr) {
      const ParamPart& part = (*parts)[i];
      TORCH_CHECK(part.begin >= 0 && part.len >= 0 && part.begin + part.len <= p.numel(), "AdamW: part [", part.begin,
                  ", +", part.len, ") outside ", name, " of ", p.numel(), " elements");
      s.param = part.value.defined() ? part.value : p.detach().view({-1}).narrow(0, part.begin, part.len);
      TORCH_CHECK(s.param.numel() == part.len, "AdamW: the master of ", name, " has ", s.param.numel(),
                  " elements for a part of ", part.len);
      s.grad = part.grad;
      s.begin = part.begin;
    }
    s.exp_avg = torch::zeros_like(s.param, torch::MemoryFormat::Preserve);
    s.exp_avg_sq = torch::zeros_like(s.param, torch::MemoryFormat::Preserve);
    slots_.push_back(std::move(s));
    step_tensor(p.device(), group);
  }
}

void AdamW::zero_grad() {
  for (auto& s : slots_) {
    if (s.owner.grad().defined()) s.owner.mutable_grad() = torch::Tensor();
  }
}

torch::Tensor& AdamW::step_tensor(const torch::Device& device, int group) {
  auto& step = step_tensors_[{device.str(), group}];
  if (!step.defined())
    step = torch::full({}, static_cast<double>(loaded_t_[group]),
                       torch::TensorOptions().dtype(torch::kFloat32).device(device));
  return step;
}

void AdamW::step(double lr, const torch::Tensor& found_inf) {
  TORCH_CHECK(lr >= 0, "AdamW::step: learning rate ", lr, " < 0");
  update(lr, found_inf);
}

void AdamW::set_step(int64_t step) {
  for (int g = 0; g < kParamGroups; ++g) lr_scale_[g] = lr_scale_at(groups_, static_cast<ParamGroup>(g), step);
}

void AdamW::set_lr(double lr) {
  for (const auto& s : slots_) {
    auto& t = lr_tensors_[{s.param.device().str(), s.group}];
    if (!t.defined()) t = torch::empty({}, torch::TensorOptions().dtype(torch::kFloat32).device(s.param.device()));
  }
  for (auto& [key, t] : lr_tensors_) t.fill_(lr * lr_scale_[key.second]);  // x1.0 is exact: lr as before groups
}

void AdamW::step_device_lr(const torch::Tensor& found_inf) {
  TORCH_CHECK(!lr_tensors_.empty(), "AdamW::step_device_lr before set_lr");
  update(-1.0, found_inf);
}

void AdamW::update(double lr, const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  // Bias correction reads state_steps, which the kernel does not advance (torch.optim adds 1
  // before calling it and subtracts found_inf after): a group's slots share its step count, so
  // one step tensor per device and group is advanced by 1 - found_inf on the device, for the
  // groups with a gradient this step. Integers below 2^24 are exact in float32.
  bool active[kParamGroups] = {};
  for (const auto& s : slots_) active[s.group] = active[s.group] || s.owner.grad().defined();
  for (auto& [key, step] : step_tensors_) {
    if (!active[key.second]) continue;
    if (found_inf.defined()) step.add_(1.0 - found_inf.to(step.device()));
    else step.add_(1.0);
  }
  // ATen's fused AdamW (one kernel over all tensors of a call on CUDA, a vectorised loop on CPU),
  // the kernel behind torch.optim.AdamW(fused=True): one call per group and decay.
  for (int group = 0; group < kParamGroups; ++group)
    for (const bool decay : {true, false}) fused_update(group, decay, lr, found_inf);
}

void AdamW::fused_update(int group, bool decay, double lr, const torch::Tensor& found_inf) {
  std::vector<torch::Tensor> p, g, m, v, steps;
  for (auto& s : slots_) {
    if (s.group != group || s.decay != decay || !s.has_grad()) continue;
    p.push_back(s.param);
    g.push_back(s.gradient());
    m.push_back(s.exp_avg);
    v.push_back(s.exp_avg_sq);
    steps.push_back(step_tensors_.at({s.param.device().str(), group}));
  }
  if (p.empty()) return;
  std::optional<at::Tensor> inf;
  if (found_inf.defined()) inf = found_inf.to(p.front().device(), torch::kFloat32);
  const double wd = decay ? weight_decay_ : 0.0;
  if (lr >= 0)
    at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, lr * lr_scale_[group], beta1_, beta2_, wd, eps_,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, inf);
  else
    at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, lr_tensors_.at({p.front().device().str(), group}),
                      beta1_, beta2_, wd, eps_, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, inf);
}

int64_t AdamW::group_steps(int group) const {
  for (const auto& [key, step] : step_tensors_)
    if (key.second == group) return static_cast<int64_t>(step.item<double>());
  return loaded_t_[group];
}

int64_t AdamW::steps_taken() const {
  int64_t most = 0;
  for (int g = 0; g < kParamGroups; ++g) most = std::max(most, group_steps(g));
  return most;
}

model::NamedTensors AdamW::state() const {
  model::NamedTensors out;
  out.emplace_back("__step__", torch::tensor({steps_taken()}, torch::kInt64));
  for (int g = 0; g < kParamGroups; ++g)
    out.emplace_back(absl::StrCat("__step__.", group_name(static_cast<ParamGroup>(g))),
                     torch::tensor({group_steps(g)}, torch::kInt64));
  for (const auto& s : slots_) {
    out.emplace_back(s.name + ".exp_avg", s.exp_avg);
    out.emplace_back(s.name + ".exp_avg_sq", s.exp_avg_sq);
  }
  return out;
}

absl::Status AdamW::load_state(const model::NamedTensors& state, const std::string& source) {
  std::map<std::string, torch::Tensor> m(state.begin(), state.end());
  std::map<std::string, int64_t> steps;
  for (const auto& [name, t] : state)
    if (name.rfind("__step__", 0) == 0) steps[name] = t.item<int64_t>();
  // The whole moment, or (parts) this rank's elements of it.
  auto read = [&](const std::string& key, at::IntArrayRef shape, int64_t begin, torch::Tensor out) -> absl::Status {
    auto f = m.find(key);
    if (f == m.end()) return absl::DataLossError(source + ": missing " + key);
    if (f->second.sizes() != shape)
      return absl::FailedPreconditionError(source + ": " + key + " has another shape (other preset?)");
    out.copy_(f->second.reshape({-1}).narrow(0, begin, out.numel()));
    return absl::OkStatus();
  };
  return load_state(read, steps, source);
}

absl::Status AdamW::load_state(const MomentReader& read, const std::map<std::string, int64_t>& steps,
                               const std::string& source) {
  auto it = steps.find("__step__");
  if (it == steps.end()) return absl::DataLossError(source + ": no __step__ tensor (not an lmforge optimizer state)");
  torch::NoGradGuard no_grad;
  for (auto& s : slots_) {
    for (auto* pair : {&s.exp_avg, &s.exp_avg_sq}) {
      const std::string key = s.name + (pair == &s.exp_avg ? ".exp_avg" : ".exp_avg_sq");
      auto flat = torch::empty({pair->numel()}, pair->options().device(torch::kCPU));
      LM_RETURN_IF_ERROR(read(key, s.owner.sizes(), s.begin, flat));
      pair->copy_(flat.view(pair->sizes()));
    }
  }
  for (int g = 0; g < kParamGroups; ++g) {
    auto own = steps.find(absl::StrCat("__step__.", group_name(static_cast<ParamGroup>(g))));
    loaded_t_[g] = own != steps.end() ? own->second : it->second;
  }
  for (auto& [key, step] : step_tensors_) step.fill_(static_cast<double>(loaded_t_[key.second]));
  return absl::OkStatus();
}

std::vector<AdamW::MomentPart> AdamW::moment_parts() const {
  std::vector<MomentPart> out;
  for (const auto& s : slots_)
    out.push_back({s.name, s.owner.sizes().vec(), s.begin, s.param.numel(), s.exp_avg, s.exp_avg_sq});
  return out;
}

int64_t AdamW::moment_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  return n;
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
