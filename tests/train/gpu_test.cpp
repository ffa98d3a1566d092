// GPU-only checks (ctest label gpu): each skips cleanly without a CUDA device, so the CPU CI
// compiles them and scripts/gpu-check.sh runs them on the GPU machine (`ctest -L gpu`).
// They compare every CUDA fast path with its reference: SDPA's GPU backends against the
// reference attention, the fused AdamW kernel on the GPU against the same kernel on the CPU,
// the start-up arbiter and causality check on a CUDA model under bf16 autocast.
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/file.h"
#include "runtime/runtime.h"
#include "model/config.h"
#include "model/fused_ops.h"
#include "model/kernels/fused_kernels.h"
#include "model/transformer.h"
#include "model/verify.h"
#include "train/device.h"
#include "train/optim.h"
#include "train/trainer.h"
#include "tests/train/synthetic_source.h"

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

TEST_F(Gpu, EveryFastPathMatchesItsReferenceOnCuda) {
  // The start-up registry (model/verify.h) on this GPU, fp32 and bf16: attention.sdpa,
  // rms_norm.aten (CUDA only) and loss.chunked, forward and backward. Then the gradient-flow
  // arbiter with all of them on.
  auto cfg = *model::preset("tiny");
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    model::Transformer m(cfg);
    m->to(cuda);
    auto r = model::verify_fast_paths(m, cuda, dt, 21);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.checks.size(), 3u) << r.summary();
    AutocastGuard autocast(cuda, dt == torch::kBFloat16);
    auto grad = model::check_gradient_flow(m, 2, 64, 4);
    EXPECT_TRUE(grad.ok()) << grad.summary();
  }
}

TEST_F(Gpu, EachSdpaBackendMatchesTheReference) {
  // train.hardware.sdpa_backend restricts SDPA to one kernel; each that runs here must equal the reference
  // (a backend this GPU or shape does not support throws "no available kernel": reported, not failed).
  for (const char* b : {"flash", "cudnn", "efficient"}) {
    ASSERT_TRUE(model::set_sdpa_backend(b));
    try {
      auto r = model::check_attention_equivalence(2, 8, 256, 64, torch::kBFloat16, cuda, 31, /*kv_heads=*/2);
      EXPECT_TRUE(r.ok()) << b << ": " << r.summary();
    } catch (const std::exception& e) {
      std::printf("sdpa backend %s not available here: %.200s\n", b, e.what());
    }
  }
  model::set_sdpa_backend("auto");
}

// Restores the sync-debug mode even when a check throws.
struct SyncDebugGuard {
  explicit SyncDebugGuard(c10::cuda::SyncDebugMode m) { c10::cuda::warning_state().set_sync_debug_mode(m); }
  ~SyncDebugGuard() { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
};

// lmforge's own kernels (swiglu.cuda, rope.cuda) in the start-up registry on this GPU, fp32 and
// bf16, then the arbiter and causality with them on; a planted break in one is caught, named and
// switched to its reference while the other stays on.
TEST_F(Gpu, OwnCudaKernelsMatchTheirReferencesAndABrokenOneFallsBack) {
  auto cfg = *model::preset("tiny");
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    model::Transformer m(cfg);
    m->to(cuda);
    ASSERT_TRUE(m->set_cuda_kernels(true)) << "this build has no CUDA kernels";
    auto r = model::verify_fast_paths(m, cuda, dt, 31);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.checks.size(), 6u) << r.summary();
    EXPECT_NE(r.summary().find("swiglu.cuda: ok"), std::string::npos) << r.summary();
    EXPECT_NE(r.summary().find("rope.cuda: ok"), std::string::npos) << r.summary();
    EXPECT_NE(r.summary().find("add_rms_norm.cuda: ok"), std::string::npos) << r.summary();
    AutocastGuard autocast(cuda, dt == torch::kBFloat16);
    auto grad = model::check_gradient_flow(m, 2, 64, 4);
    EXPECT_TRUE(grad.ok()) << grad.summary();
    auto causal = model::check_causality(m, 64, 5);
    EXPECT_TRUE(causal.ok()) << causal.summary();
  }
  model::Transformer m(cfg);
  m->to(cuda);
  ASSERT_TRUE(m->set_cuda_kernels(true));
  model::set_debug_break_fast_path("rope.cuda");
  auto r = model::verify_fast_paths(m, cuda, torch::kBFloat16, 32);
  model::set_debug_break_fast_path("");
  EXPECT_EQ(r.fell_back, std::vector<std::string>{"rope.cuda"}) << r.summary();
  EXPECT_FALSE(m->cuda_rope());
  EXPECT_TRUE(m->cuda_swiglu());
  EXPECT_TRUE(m->cuda_add_norm());
  model::set_debug_break_fast_path("add_rms_norm.cuda");
  r = model::verify_fast_paths(m, cuda, torch::kBFloat16, 33);
  model::set_debug_break_fast_path("");
  EXPECT_EQ(r.fell_back, std::vector<std::string>{"add_rms_norm.cuda"}) << r.summary();
  EXPECT_FALSE(m->cuda_add_norm());
  EXPECT_TRUE(m->cuda_swiglu());
}

// The fused residual add + RMSNorm when only one of its outputs reaches a loss: the reference's
// gradients either way. A width the kernel does not take is refused by fused_add_rms_norm_takes
// (the model then runs the add and the norm apart).
TEST_F(Gpu, AddRmsNormKernelHandlesOneSidedGradientsAndWideRows) {
  for (int64_t C : {int64_t{1024}, kernels::kAddRmsNormMaxCols + 8}) {
    auto x = torch::randn({64, C}, torch::TensorOptions().device(cuda)).requires_grad_(true);
    auto r = torch::randn({64, C}, torch::TensorOptions().device(cuda)).requires_grad_(true);
    auto w = torch::ones({C}, torch::TensorOptions().device(cuda)).requires_grad_(true);
    if (!model::fused_add_rms_norm_takes(x, r, torch::kFloat32)) {
      EXPECT_GT(C, kernels::kAddRmsNormMaxCols);
      continue;
    }
    for (int side = 0; side < 2; ++side) {
      auto [s, y] = model::fused_add_rms_norm(x, r, w, 1e-5, torch::kFloat32);
      auto ref_s = x + r;
      auto ref_y = model::reference_rms_norm(ref_s, w, 1e-5);
      auto loss = side == 0 ? s.square().sum() : y.square().sum();
      auto ref = side == 0 ? ref_s.square().sum() : ref_y.square().sum();
      auto g = torch::autograd::grad({loss}, {x, r, w}, {}, false, false, /*allow_unused=*/true);
      auto gr = torch::autograd::grad({ref}, {x, r, w}, {}, false, false, true);
      for (int i = 0; i < 3; ++i) {
        auto a = g[i].defined() ? g[i] : torch::zeros_like(gr[i].defined() ? gr[i] : w);
        auto b = gr[i].defined() ? gr[i] : torch::zeros_like(a);
        EXPECT_LE((a - b).abs().max().item<double>(), 1e-4 * (1 + b.abs().max().item<double>()))
            << "input " << i << ", loss on " << (side == 0 ? "s" : "y");
      }
    }
  }
}

// An error an earlier asynchronous operation left pending is found before the launch and named as
// earlier, not blamed on this kernel (issue 38 item 14); it is read, so the next launch runs.
TEST_F(Gpu, OwnKernelLaunchNamesAPendingErrorAsEarlier) {
  auto a = torch::randn({256}, torch::TensorOptions().device(cuda));
  auto b = torch::randn({256}, torch::TensorOptions().device(cuda));
  auto y = torch::empty_like(a);
  torch::cuda::synchronize();
  auto launch = [&] {
    return kernels::swiglu_forward(a.data_ptr(), b.data_ptr(), y.data_ptr(), a.numel(), kernels::DType::kFloat32,
                                   nullptr);
  };
  void* p = nullptr;
  ASSERT_NE(cudaMalloc(&p, size_t{1} << 60), cudaSuccess);  // leaves cudaErrorMemoryAllocation pending
  EXPECT_EQ(launch(), -static_cast<int>(cudaErrorMemoryAllocation));
  EXPECT_EQ(launch(), 0);
  ASSERT_NE(cudaMalloc(&p, size_t{1} << 60), cudaSuccess);
  try {
    (void)model::fused_swiglu(a, b);
    ADD_FAILURE() << "no error for the pending one";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pending before lmforge CUDA kernel swiglu_forward"), std::string::npos)
        << e.what();
  }
  (void)cudaGetLastError();
}

// The same weights and batch with the kernels on and off: the loss and every gradient agree
// (fp32 to 1e-5, bf16 autocast to 2e-2 relative).
TEST_F(Gpu, OwnCudaKernelsGiveTheReferencesLossAndGradients) {
  auto cfg = *model::preset("tiny");
  auto window = torch::randint(cfg.vocab_size, {4, 65}, torch::kInt64).to(cuda);
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    std::vector<std::pair<double, std::vector<torch::Tensor>>> runs;
    for (bool kernels : {false, true}) {
      model::Transformer m(cfg);
      m->init_weights(9);
      m->to(cuda);
      ASSERT_TRUE(m->set_cuda_kernels(kernels));
      AutocastGuard autocast(cuda, dt == torch::kBFloat16);
      auto loss = m->loss(window);
      loss.backward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : m->parameters()) grads.push_back(p.grad().detach().to(torch::kFloat32).cpu());
      runs.emplace_back(loss.item<double>(), grads);
    }
    const double tol = dt == torch::kBFloat16 ? 2e-2 : 1e-5;
    EXPECT_NEAR(runs[1].first, runs[0].first, tol * std::abs(runs[0].first));
    for (size_t i = 0; i < runs[0].second.size(); ++i) {
      const auto& a = runs[1].second[i];
      const auto& b = runs[0].second[i];
      const double rel = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
      EXPECT_LE(rel, tol) << "parameter " << i << (dt == torch::kBFloat16 ? " (bf16)" : " (fp32)");
    }
  }
}

// A tiny-preset run on CUDA in a fresh temporary folder: micro-batch 4 x 64, grad_accum 2, no
// checkpoints.
FitRequest cuda_request(const std::string& name, int64_t steps) {
  FitRequest r;
  r.run_dir = (std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))).string();
  (void)lm::remove_tree(r.run_dir);
  r.model = *model::preset("tiny");
  r.train.hardware.device = "cuda";
  r.train.steps = steps;
  r.train.batch.micro_batch = 4;
  r.train.batch.seq_len = 64;
  r.train.batch.grad_accum = 2;
  r.train.checkpoint.interval = 0;
  r.tokenizer_hash = "tok-test";
  return r;
}

TEST_F(Gpu, TrainStepHasNoHostSync) {
  // CUDA's sync-debug mode set to error makes any synchronizing call (.item(), a blocking copy,
  // cudaDeviceSynchronize, a stream sync) throw inside the step: a sync that creeps back fails here.
  // bf16 autocast, grad_accum 2, clipping on (the on-device skip: ClipAndSkipStayOnTheDevice);
  // with lmforge's own kernels off (the default) and on, and replayed as a CUDA graph (captured
  // at the third step, one of the warm-up steps: the capture itself synchronizes once).
  for (int variant = 0; variant < 3; ++variant) {
    const bool kernels = variant == 1, graphs = variant == 2;
    SCOPED_TRACE(graphs ? "train.hardware.cuda_graphs on" : kernels ? "train.hardware.cuda_kernels on" : "defaults");
    FitRequest r = cuda_request("lm_gpu_step_", 100);
    r.train.hardware.dtype = "bf16";
    r.train.logging.interval = 1000;
    r.train.hardware.cuda_kernels = kernels;
    r.train.hardware.cuda_graphs = graphs;
    testing::SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
    const ValSets no_validation;
    auto t = Trainer::create(r, src, no_validation);
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<StepResult> steps;
    for (int i = 0; i < 3; ++i) steps.push_back((*t)->train_step());  // warm-up: allocator, cuBLAS handles, capture
    torch::cuda::synchronize();
    {
      SyncDebugGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
      for (int i = 0; i < 6; ++i) {
        try {
          steps.push_back((*t)->train_step());
        } catch (const std::exception& e) {
          FAIL() << "step " << steps.size() + 1 << " synchronized with the host: " << e.what();
        }
      }
    }
    // Read afterwards (a sync is fine now): every step's loss and norm arrived, finite.
    for (size_t i = 0; i < steps.size(); ++i) {
      auto rec = steps[i].record.cpu();
      EXPECT_TRUE(std::isfinite(rec[0].item<double>()) && std::isfinite(rec[1].item<double>())) << "step " << i + 1;
    }
    (void)lm::remove_tree(r.run_dir);
  }
}

TEST_F(Gpu, ClipAndSkipStayOnTheDevice) {
  // clip_grad_norm and AdamW::step with found_inf under the sync-debug error mode.
  auto w = torch::randn({256, 128}, torch::TensorOptions().device(cuda)).requires_grad_(true);
  w.mutable_grad() = torch::randn_like(w);
  AdamW opt({{"w", w}}, TrainConfig{});
  auto before = w.detach().clone();
  {
    SyncDebugGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
    GradNorm n = clip_grad_norm({w}, 1.0);
    opt.step(1e-2, n.total.isfinite().logical_not().to(torch::kFloat32));
    opt.step(1e-2, torch::ones({}, torch::TensorOptions().dtype(torch::kFloat32).device(cuda)));
  }
  EXPECT_EQ(opt.steps_taken(), 1);
  EXPECT_FALSE(torch::equal(w.detach(), before));
}

// A replayed step uses the current learning rate and the current batch: the same run with the
// step captured as a CUDA graph (at step 3) and without, the learning rate rising every step of a
// warm-up, gives the same losses (a replay with step 3's learning rate baked in would drift by
// ~1e-3 within a few steps). fp32 without TF32, grad_accum 2 (both micro-batches in the graph).
TEST_F(Gpu, CudaGraphReplaysUseTheCurrentLearningRate) {
  std::vector<std::vector<double>> losses;
  for (bool graphs : {false, true}) {
    FitRequest r = cuda_request("lm_gpu_graph_", 10);
    r.train.hardware.dtype = "fp32";
    r.train.hardware.tf32 = false;
    r.train.hardware.cuda_graphs = graphs;
    r.train.schedule.warmup_steps = 8;
    r.train.optimizer.lr = 3e-3;
    r.train.logging.interval = 1;
    testing::SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
    auto s = fit(r, src, {});
    ASSERT_TRUE(s.ok()) << s.status();
    losses.push_back(s->losses);
    (void)lm::remove_tree(r.run_dir);
  }
  ASSERT_EQ(losses[0].size(), 10u);
  ASSERT_EQ(losses[1].size(), 10u);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-6 * losses[0][i]) << "step " << i + 1 << " (graphed from step 3)";
}

// Issue 39: fit reports the device's peak allocation beside what `lmtrain plan` counts for the
// same run (bf16). On a small model the CUDA context's own workspaces weigh more than on the
// presets, so this only checks both are there and of one order; the 400m and 1b figures come from
// scripts/gpu-check.sh (peak_vs_plan in each step stage's line).
TEST_F(Gpu, FitReportsItsPeakMemoryBesideThePlan) {
  FitRequest r = cuda_request("lm_gpu_peak_", 4);
  r.train.hardware.dtype = "bf16";
  testing::SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
  auto s = fit(r, src, {});
  ASSERT_TRUE(s.ok()) << s.status();
  (void)lm::remove_tree(r.run_dir);
  EXPECT_GT(s->peak_device_bytes, 0);
  EXPECT_GT(s->plan_device_bytes, 0);
  std::printf("peak %.1f MB allocated, plan %.1f MB (%.2fx)\n", s->peak_device_bytes / 1e6, s->plan_device_bytes / 1e6,
              s->plan_device_bytes > 0 ? s->peak_device_bytes / s->plan_device_bytes : 0.0);
  EXPECT_LT(s->peak_device_bytes, 20 * s->plan_device_bytes);
  EXPECT_NE(s->summary().find("peak GPU memory"), std::string::npos) << s->summary();
}

}  // namespace
}  // namespace lm::train
