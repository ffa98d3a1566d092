// Fault injection for the reliability tests (train.inject_nan_step, inject_nan_steps,
// inject_nan_in): read from the config here and nowhere else. When off, the training step pays
// one integer comparison per step.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"

namespace lm::train {

class FaultInjector {
 public:
  enum class Site { kNone, kLoss, kGradient };

  FaultInjector() = default;
  explicit FaultInjector(const TrainConfig& tc);

  // Whether the config asks for any fault at all.
  bool any() const { return first_ >= 0 && site_ != Site::kNone; }
  // What to poison at 0-based optimizer step `step` (kNone unless the config asks for it).
  Site at(int64_t step) const {
    if (first_ < 0 || step < first_ || step >= first_ + count_) return Site::kNone;
    return site_;
  }
  // loss * NaN, so backward carries NaN into every gradient.
  static torch::Tensor poison_loss(const torch::Tensor& loss);
  // Sets the first element of the first down_proj gradient to NaN (a parameter the NaN handler
  // must name).
  static void poison_gradient(const std::vector<std::pair<std::string, torch::Tensor>>& params);

 private:
  int64_t first_ = -1, count_ = 1;
  Site site_ = Site::kNone;
};

}  // namespace lm::train
