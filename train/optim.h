// AdamW over named parameters, with weight decay on matrices only, and its state as named
// tensors so checkpoints (optimizer.safetensors) resume it bit-exactly.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "train/config.h"

namespace lm::train {

class AdamW {
 public:
  // Decay applies to 2-D weights except the token embedding (unless decay_embeddings);
  // norms (1-D) never decay.
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainConfig& cfg);

  // One update with learning rate `lr`: at::_fused_adamw_, the kernel of
  // torch.optim.AdamW(fused=True).
  void step(double lr);
  void zero_grad();

  int64_t steps_taken() const { return t_; }
  const std::vector<std::string>& decayed() const { return decayed_; }
  const std::vector<std::string>& not_decayed() const { return not_decayed_; }

  model::NamedTensors state() const;  // "<param>.exp_avg", "<param>.exp_avg_sq", "__step__"
  absl::Status load_state(const model::NamedTensors& state, const std::string& source);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool decay;
  };
  std::vector<Slot> slots_;
  std::vector<std::string> decayed_, not_decayed_;
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t t_ = 0;
  std::map<std::string, torch::Tensor> step_tensors_;  // device -> float32 scalar holding t_
};

// Global L2 norm of all gradients; clips in place to max_norm when max_norm > 0.
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace lm::train
