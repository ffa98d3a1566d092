// Log-likelihood of token continuations under a Transformer, batched: the one place where
// lmeval runs the model, for both `nll` (windows of a token stream) and `mc` (choices).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "eval/score.h"
#include "model/transformer.h"

namespace lm::eval {

struct ScorerOptions {
  int64_t batch_size = 16;  // sequences per forward pass
  torch::Device device = torch::kCPU;
  // bf16 matmuls: on CUDA bf16 weights; on CPU fp32 weights under bf16 autocast, as `fit --dtype
  // bf16` trains (its fused CPU paths). The log-softmax is always fp32.
  bool bf16 = false;
  std::string progress_label;  // empty: no progress line
};

// Per-token log-probs of each request's continuation. A request longer than the model's
// max_seq_len + 1 is cut from the left as the harness does ((ctx + cont)[-(L+1):][:-1]).
// Requests are sorted by length so padding stays small; pads sit to the right, where the
// causal mask keeps them from touching scored positions.
std::vector<std::vector<double>> score_requests(model::Transformer& model,
                                                const std::vector<TokenRequest>& requests,
                                                const ScorerOptions& opts);

// Transformer(cfg) after init_weights(seed), in eval mode: exactly the run's weights before
// step 1, since `lmtrain fit` initialises with train.seed the same way (the random twin).
model::Transformer make_twin(const model::ModelConfig& cfg, uint64_t seed);

// A Scorer bound to a model (the model must outlive it).
Scorer make_model_scorer(model::Transformer model, ScorerOptions opts);

}  // namespace lm::eval
