// The CPU fast paths of docs/performance.md against their plain twins.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/config.h"
#include "model/transformer.h"

namespace lm::model {
namespace {

TEST(FastPaths, LossEqualsCrossEntropyBitExactlyInFp32) {
  // loss() uses log_softmax(x, fp32) + nll_loss; ATen's cross_entropy is that composition,
  // so fp32 must agree exactly (tolerance 0).
  auto cfg = *preset("tiny");
  torch::manual_seed(3);
  Transformer m(cfg);
  auto w = torch::randint(0, cfg.vocab_size, {2, 33}, torch::kInt64);
  auto logits = m->forward(w.narrow(1, 0, 32));
  auto want = torch::nn::functional::cross_entropy(logits.reshape({-1, cfg.vocab_size}),
                                                   w.narrow(1, 1, 32).reshape({-1}));
  EXPECT_EQ(m->loss(w).item<float>(), want.item<float>());
}

TEST(FastPaths, FusedAttentionMatchesReferenceUnderBf16Autocast) {
  // bf16 inputs, fp32 softmax in both: differences come from bf16 rounding of the probabilities
  // and the GEMM order; 2e-2 is ~3 bf16 ulps at |out| ~ 1.
  torch::manual_seed(5);
  auto make = [] { return torch::randn({2, 4, 64, 16}).to(torch::kBFloat16); };
  auto q = make(), k = make(), v = make();
  auto a = fused_attention(q, k, v).to(torch::kFloat32);
  auto b = reference_attention(q, k, v, true).to(torch::kFloat32);
  EXPECT_LT((a - b).abs().max().item<float>(), 2e-2);
  // And it is causal: the first query sees only the first key, so its output is v[..., 0, :].
  EXPECT_LT((a.select(2, 0) - v.select(2, 0).to(torch::kFloat32)).abs().max().item<float>(), 1e-6);
}

}  // namespace
}  // namespace lm::model
