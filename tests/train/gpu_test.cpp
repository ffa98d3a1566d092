// GPU-only checks (ctest label gpu): each skips cleanly without a CUDA device, so the CPU CI
// compiles them and scripts/gpu-check.sh runs them on the GPU machine (`ctest -L gpu`).
// They compare every CUDA fast path with its reference: SDPA's GPU backends against the
// reference attention, the fused AdamW kernel on the GPU against the same kernel on the CPU,
// the start-up arbiter and causality check on a CUDA model under bf16 autocast.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/runtime.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/verify.h"
#include "train/device.h"
#include "train/optim.h"

namespace lm::train {
namespace {

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (" << build_info().device << ")";
  }
  const torch::Device cuda{torch::kCUDA, 0};
};

TEST_F(Gpu, FusedAttentionMatchesReferenceFp32AndBf16) {
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    auto r = model::check_attention_equivalence(2, 8, 257, 64, dt, cuda, 11);
    EXPECT_TRUE(r.ok()) << r.summary();
    auto g = model::check_attention_equivalence(2, 8, 257, 64, dt, cuda, 12, /*kv_heads=*/2);
    EXPECT_TRUE(g.ok()) << "grouped-query: " << g.summary();
  }
}

TEST_F(Gpu, ArbiterAndCausalityOnCudaUnderBf16) {
  auto cfg = model::preset("tiny");
  ASSERT_TRUE(cfg.ok());
  model::Transformer m(*cfg);
  m->init_weights(3);
  m->to(cuda);
  AutocastGuard autocast(cuda, true);
  auto grad = model::check_gradient_flow(m, 2, 64, 4);
  EXPECT_TRUE(grad.ok()) << grad.summary();
  auto causal = model::check_causality(m, 64, 5);
  EXPECT_TRUE(causal.ok()) << causal.summary();
}

TEST_F(Gpu, FusedAdamWOnCudaEqualsCpu) {
  torch::manual_seed(7);
  auto w = torch::randn({64, 32}), b = torch::randn({32});
  TrainConfig c;
  auto run = [&](torch::Device dev) {
    auto pw = w.clone().to(dev).requires_grad_(true), pb = b.clone().to(dev).requires_grad_(true);
    AdamW opt({{"w", pw}, {"b", pb}}, c);
    for (int s = 1; s <= 5; ++s) {
      pw.mutable_grad() = (torch::ones_like(w) * 0.1 * s).to(dev);
      pb.mutable_grad() = (torch::ones_like(b) * -0.2 * s).to(dev);
      opt.step(1e-2);
    }
    return std::make_pair(pw.detach().cpu(), pb.detach().cpu());
  };
  auto [cw, cb] = run(torch::kCPU);
  auto [gw, gb] = run(cuda);
  EXPECT_LT((cw - gw).abs().max().item<double>(), 1e-6);
  EXPECT_LT((cb - gb).abs().max().item<double>(), 1e-6);
}

TEST_F(Gpu, PinnedAsyncCopyArrivesIntact) {
  auto host = torch::arange(1 << 20, torch::kInt64).pin_memory();
  ASSERT_TRUE(host.is_pinned());
  auto dev = host.to(cuda, /*non_blocking=*/true);
  EXPECT_TRUE(torch::equal(dev.cpu(), host));
}

}  // namespace
}  // namespace lm::train
