#include "train/faults.h"

#include <limits>

namespace lm::train {

FaultInjector::FaultInjector(const TrainConfig& tc)
    : first_(tc.debug.inject_nan_step),
      count_(tc.debug.inject_nan_steps),
      site_(tc.debug.inject_nan_in == "loss" ? Site::kLoss : Site::kGradient) {}

torch::Tensor FaultInjector::poison_loss(const torch::Tensor& loss) {
  return loss * std::numeric_limits<double>::quiet_NaN();
}

void FaultInjector::poison_gradient(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    if (name.find("down_proj") != std::string::npos && p.grad().defined()) {
      p.grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
  }
}

}  // namespace lm::train
