// bf16 autocast for a scope: the one guard for training (train/trainer.cpp) and evaluation
// (eval/model_scorer.cpp), so both run the same mixed-precision paths.
#pragma once

#include <torch/torch.h>

namespace lm::model {

// Enables bf16 autocast on `device` for its lifetime (fp32 master weights stay fp32); with
// enabled = false it does nothing.
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool cuda_;
};

}  // namespace lm::model
