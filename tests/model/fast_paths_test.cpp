// The CPU fast paths of docs/performance.md against their plain twins.
#include <gtest/gtest.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>

#include "model/config.h"
#include "model/transformer.h"
#include "model/verify.h"

namespace lm::model {
namespace {

TEST(FastPaths, ModelLossEqualsCrossEntropyOfItsLogits) {
  // loss() runs the chunked linear_cross_entropy; forward() + cross_entropy is the plain path.
  // fp32: only the summation order of the mean differs (1e-6 relative at loss ~6).
  auto cfg = *preset("tiny");
  torch::manual_seed(3);
  Transformer m(cfg);
  auto w = torch::randint(0, cfg.vocab_size, {2, 33}, torch::kInt64);
  auto logits = m->forward(w.narrow(1, 0, 32));
  auto want = torch::nn::functional::cross_entropy(logits.reshape({-1, cfg.vocab_size}),
                                                   w.narrow(1, 1, 32).reshape({-1}));
  EXPECT_NEAR(m->loss(w).item<float>(), want.item<float>(), 1e-6 * want.item<float>());
}

// Relative Frobenius distance.
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm() / b.to(torch::kFloat64).norm())
      .item<double>();
}

struct LceCase {
  torch::Tensor h, w, t;
};

LceCase lce_case(int64_t n, int64_t c, int64_t v) {
  torch::manual_seed(11);
  return {torch::randn({n, c}).requires_grad_(true), (0.5 * torch::randn({v, c})).requires_grad_(true),
          torch::randint(0, v, {n}, torch::kInt64)};
}

TEST(FastPaths, LinearCrossEntropyMatchesReferenceInFp32) {
  // Loss and both gradients against nll_loss(log_softmax(h wᵀ)) + autograd, with several chunks
  // and a partial last one (300 rows in chunks of 64), one chunk, and a scaled upstream gradient
  // (gradient accumulation multiplies the loss by 1/k). fp32 tolerance 1e-6: reassociation only.
  for (int64_t chunk : {64, 1000}) {
    auto c = lce_case(300, 32, 97);
    auto ref = reference_linear_cross_entropy(c.h, c.w, c.t);
    (ref * 0.25).backward();
    auto rh = c.h.grad().clone(), rw = c.w.grad().clone();
    c.h.mutable_grad().zero_();
    c.w.mutable_grad().zero_();
    auto got = linear_cross_entropy(c.h, c.w, c.t, chunk);
    (got * 0.25).backward();
    EXPECT_NEAR(got.item<double>(), ref.item<double>(), 1e-6 * ref.item<double>()) << chunk;
    EXPECT_LT(rel(c.h.grad(), rh), 1e-6) << chunk;
    EXPECT_LT(rel(c.w.grad(), rw), 1e-6) << chunk;
  }
}

TEST(FastPaths, LinearCrossEntropyMatchesReferenceUnderBf16Autocast) {
  // Both sides take bf16 logits and an fp32 log-softmax; the fused side also rounds the logits'
  // gradient to bf16 before the two matmuls (autograd does the same through the bf16 linear), so
  // the gradients agree to bf16 precision (2^-8 = 4e-3 relative; 1e-2 allows the GEMM order).
  auto c = lce_case(256, 64, 512);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto ref = reference_linear_cross_entropy(c.h, c.w, c.t);
  ref.backward();
  auto rh = c.h.grad().clone(), rw = c.w.grad().clone();
  c.h.mutable_grad().zero_();
  c.w.mutable_grad().zero_();
  auto got = linear_cross_entropy(c.h, c.w, c.t, 100);
  got.backward();
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(c.h.grad().scalar_type(), torch::kFloat32);
  EXPECT_EQ(c.w.grad().scalar_type(), torch::kFloat32);
  EXPECT_NEAR(got.item<double>(), ref.item<double>(), 1e-4 * ref.item<double>());
  EXPECT_LT(rel(c.h.grad(), rh), 1e-2);
  EXPECT_LT(rel(c.w.grad(), rw), 1e-2);
}

TEST(FastPaths, LinearCrossEntropyIsExactWhereTheTargetProbabilityUnderflows) {
  // Rows whose target logit is ~200 below the best one: p[target] underflows fp32, so the loss
  // must come from the exact log-softmax fallback (finite, equal to the reference), not -log(0).
  auto c = lce_case(64, 8, 40);
  torch::NoGradGuard no_grad;
  auto h = c.h.clone();
  h.narrow(0, 0, 5).mul_(300.0);  // huge logits for 5 rows
  auto ref = reference_linear_cross_entropy(h, c.w, c.t).item<double>();
  auto got = linear_cross_entropy(h, c.w, c.t, 16).item<double>();
  ASSERT_TRUE(std::isfinite(got));
  ASSERT_GT(ref, 5.0);  // the case really is extreme
  EXPECT_NEAR(got, ref, 1e-5 * ref);
}

TEST(FastPaths, LinearCrossEntropyWithoutGradIsTheSameLoss) {
  // Evaluation (NoGrad) takes the forward-only branch: the same value, bit for bit.
  auto c = lce_case(200, 16, 50);
  auto with_grad = linear_cross_entropy(c.h, c.w, c.t, 64).item<double>();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(linear_cross_entropy(c.h, c.w, c.t, 64).item<double>(), with_grad);
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

namespace lm::model {
namespace {

// Resets the planted break even when an assertion fails.
struct BreakGuard {
  explicit BreakGuard(const std::string& name) { set_debug_break_fast_path(name); }
  ~BreakGuard() { set_debug_break_fast_path(""); }
};

std::vector<std::string> names(const FastPathReport& r) {
  std::vector<std::string> v;
  for (const auto& c : r.checks) v.push_back(c.name);
  return v;
}

TEST(FastPathRegistry, EveryPathTheModelUsesPassesOnTheCpu) {
  Transformer m(*preset("tiny"));
  auto r = verify_fast_paths(m, torch::kCPU, torch::kFloat32, 1);
  EXPECT_TRUE(r.ok()) << r.summary();
  // RMSNorm's ATen kernel is taken on CUDA only; the CPU has lmforge's own kernels instead.
  EXPECT_EQ(names(r), (std::vector<std::string>{"attention.sdpa", "loss.chunked", "rms_norm.cpu", "add_rms_norm.cpu",
                                                "swiglu.cpu", "rope.cpu", "cross_entropy.cpu"}));
  for (const auto& c : r.checks) EXPECT_LT(c.out_err, 1e-5) << c.summary();
  // bf16 (a CPU bf16 run checks in bf16): within the bf16 tolerance, no false fallback.
  auto b = verify_fast_paths(m, torch::kCPU, torch::kBFloat16, 1);
  EXPECT_TRUE(b.ok()) << b.summary();
  // The CUDA-only path still equals its twin when asked directly on the CPU.
  auto rms = fast_paths()[1].check(m, torch::kCPU, torch::kFloat32, 2);
  EXPECT_EQ(rms.name, "rms_norm.aten");
  EXPECT_TRUE(rms.ok()) << rms.summary();
}

TEST(FastPathRegistry, APlantedBrokenPathIsCaughtNamedAndSwitchedToItsReference) {
  auto cfg = *preset("tiny");
  torch::manual_seed(4);
  auto window = torch::randint(0, cfg.vocab_size, {2, 17}, torch::kInt64);
  for (const std::string path : {"attention.sdpa", "loss.chunked", "rms_norm.aten"}) {
    BreakGuard broken(path);
    Transformer m(cfg), ref(cfg);
    if (path == "rms_norm.aten") {  // used on CUDA only: check the path itself
      auto c = fast_paths()[1].check(m, torch::kCPU, torch::kFloat32, 3);
      EXPECT_FALSE(c.ok()) << c.summary();
      continue;
    }
    const float broken_loss = m->loss(window).item<float>();
    auto r = verify_fast_paths(m, torch::kCPU, torch::kFloat32, 1);
    EXPECT_EQ(r.fell_back, std::vector<std::string>{path}) << r.summary();
    EXPECT_NE(r.summary().find("MISMATCH"), std::string::npos) << r.summary();
    EXPECT_NE(r.summary().find("training with their reference instead"), std::string::npos);
    // The model now computes with the reference: the loss of the plain model, not the broken one.
    ref->set_fused_attention(false);
    ref->set_chunked_loss(false);
    const float fixed = m->loss(window).item<float>(), want = ref->loss(window).item<float>();
    EXPECT_NEAR(fixed, want, 1e-5 * want) << path;
    // At init the break moves the loss by ~2.6e-5 relative (attention) to 5% (loss), above the 1e-5 of the fixed model.
    EXPECT_GT(std::abs(broken_loss - want), 2e-5 * want) << path << ": the break must show";
  }
}

// Restores ATen's SDPA choice even when an assertion fails.
struct BackendGuard {
  explicit BackendGuard(const std::string& name) { EXPECT_TRUE(set_sdpa_backend(name)); }
  ~BackendGuard() { set_sdpa_backend("auto"); }
};

// Issue 38 item 3: an SDPA backend that does not run here (cudnn has no CPU kernel: SDPA throws, as
// an OOM or a missing kernel would on a GPU) is not the end of the fast path: the next backend is
// set and verified again, and attention stays on SDPA, with a note that says so.
TEST(FastPathRegistry, AnSdpaBackendThatFailsHereGivesWayToTheNextVerifiedOne) {
  Transformer m(*preset("tiny"));
  BackendGuard cudnn("cudnn");
  auto r = verify_fast_paths(m, torch::kCPU, torch::kFloat32, 1);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_EQ(r.sdpa_backend, "flash") << r.summary();
  EXPECT_EQ(sdpa_backend_in_use(), "flash");
  EXPECT_TRUE(m->fused_attention());
  ASSERT_EQ(r.notes.size(), 1u) << r.summary();
  EXPECT_NE(r.notes[0].find("backend cudnn failed here (threw"), std::string::npos) << r.notes[0];
}

// Each path once more at the run's own micro-batch (attention compared on row 0 of it); the losses
// keep their fixed-size check.
TEST(FastPathRegistry, EachPathIsCheckedAgainAtTheRunsShape) {
  Transformer m(*preset("tiny"));
  auto r = verify_fast_paths(m, torch::kCPU, torch::kFloat32, 1, RunShape{3, 40});
  EXPECT_TRUE(r.ok()) << r.summary();
  for (const auto& c : r.checks) {
    const bool loss = c.name == "loss.chunked" || c.name == "cross_entropy.cpu";
    const std::string want = c.name == "attention.sdpa" ? "at 3 x 40 (row 0)" : "at the run's 3 x 40";
    EXPECT_EQ(c.what.find(want) != std::string::npos, !loss) << c.summary();
  }
}

// No SDPA backend passes (a planted break in all of them): attention falls back to the reference,
// which is refused with a clear error when its [T, T] scores would not fit the device at the run's
// shape, and accepted when they would.
TEST(FastPathRegistry, NoWorkingSdpaAndNoRoomForTheReferenceIsAClearError) {
  BreakGuard broken("attention.sdpa");
  Transformer m(*preset("tiny"));
  auto r = verify_fast_paths(m, torch::kCPU, torch::kFloat32, 1, RunShape{4, 64, /*memory_bytes=*/1 << 20});
  EXPECT_EQ(r.fell_back, std::vector<std::string>{"attention.sdpa"});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("no SDPA backend passed"), std::string::npos) << r.summary();
  EXPECT_NE(r.error.find("train.batch.micro_batch"), std::string::npos) << r.error;
  EXPECT_EQ(r.checks.size(), 1u) << "checking stops at the error";
  EXPECT_EQ(sdpa_backend_in_use(), "auto") << "the backend in use is restored when none passed";
  Transformer roomy(*preset("tiny"));
  auto ok = verify_fast_paths(roomy, torch::kCPU, torch::kFloat32, 1, RunShape{4, 64, int64_t{1} << 40});
  EXPECT_TRUE(ok.error.empty()) << ok.summary();
  EXPECT_EQ(ok.fell_back, std::vector<std::string>{"attention.sdpa"});
}

}  // namespace
}  // namespace lm::model
