// Activation recompute per block (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
// Cost"; torch.utils.checkpoint's re-entrant variant): the block's forward runs without keeping
// its graph, only its inputs are saved, and backward runs the forward again with the graph on and
// backpropagates through it. A block's saved tensors (16d + 4kv + 6f + 4a bytes per token, plan.cpp)
// shrink to its inputs; the price is one more forward per block per step.
//
// Gradients are bit-identical to the run without it: the recomputed forward is the same
// deterministic arithmetic on the same inputs (no dropout: nothing random to replay), under the
// autocast state the forward saw, which backward restores; each parameter of a block receives its
// one gradient from the nested backward, so its accumulation hooks (GradSync) fire once.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace lm::model {

using BlockFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// fn(inputs) with recompute: the outputs of fn, whose backward re-runs fn. Without grad mode, or
// when no input and no parameter of fn needs a gradient, call fn directly instead.
std::vector<torch::Tensor> recompute(const BlockFn& fn, const std::vector<torch::Tensor>& inputs);

}  // namespace lm::model
