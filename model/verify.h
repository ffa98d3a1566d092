// Verification core: the checks that make silent failures loud. They run in CI, in
// `lmtrain check`, and at the start of every `lmtrain fit`.
#pragma once

#include <string>
#include <vector>

#include "model/transformer.h"

namespace lm::model {

struct GradFlowReport {
  int checked = 0;
  std::vector<std::string> missing;    // no gradient at all (detached, unused)
  std::vector<std::string> zero;       // gradient exactly zero everywhere
  std::vector<std::string> nonfinite;  // NaN or Inf in the gradient
  double loss = 0;
  bool ok() const { return missing.empty() && zero.empty() && nonfinite.empty(); }
  std::string summary() const;
};

// One forward/backward of `loss_fn` on a random batch [batch, seq+1]; every parameter that
// requires grad must receive a finite gradient with at least one nonzero entry. Gradients
// are cleared before and after, so the model is left as it was.
GradFlowReport check_gradient_flow(Transformer& model, int64_t batch, int64_t seq, uint64_t seed);

struct EquivalenceReport {
  double max_abs_out = 0;   // forward output
  double max_abs_grad = 0;  // dL/dq, dL/dk, dL/dv
  double tolerance = 0;
  bool ok() const { return max_abs_out <= tolerance && max_abs_grad <= tolerance; }
  std::string summary() const;
};

// Tolerance for comparing attention outputs of unit-scale inputs: fp32 accumulates rounding
// of ~1e-6 per op over D-long dot products; bf16 has an 8-bit mantissa (2^-8 ≈ 4e-3).
double attention_tolerance(torch::ScalarType dtype);

// fused_attention against reference_attention, outputs and gradients. kv_heads < heads (a
// divisor) checks grouped-query: the fused path takes k, v as they are, the reference repeats them.
EquivalenceReport check_attention_equivalence(int64_t batch, int64_t heads, int64_t seq,
                                              int64_t head_dim, torch::ScalarType dtype,
                                              torch::Device device, uint64_t seed,
                                              int64_t kv_heads = 0);

struct CausalityReport {
  double max_leak = 0;  // largest |Δlogit| at positions <= t when token t+1 changed
  int positions_checked = 0;
  bool ok() const { return max_leak == 0.0; }
  std::string summary() const;
};

// For several t, changes token t+1 and checks that logits at positions 0..t are bit-identical.
CausalityReport check_causality(Transformer& model, int64_t seq, uint64_t seed);

struct InitLossReport {
  double loss = 0;
  double expected = 0;  // ln(vocab)
  double band = 0;
  bool ok() const { return std::abs(loss - expected) <= band; }
  std::string summary() const;
};

// At initialisation logits are near zero, so the loss must be close to ln(vocab):
// a large gap means a broken init, a wrong head or a label shift bug.
InitLossReport check_init_loss(Transformer& model, int64_t batch, int64_t seq, uint64_t seed);

}  // namespace lm::model
