// The training step without host syncs (docs/performance.md, "A step with no host sync"): the
// optimizer skips a non-finite step on the device, clipping runs on the device, and the loop
// reads step results only on log, checkpoint and stop steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/transformer.h"
#include "train/config.h"
#include "train/device.h"
#include "train/optim.h"
#include "train/step_graph.h"
#include "train/trainer.h"
#include "tests/train/synthetic_source.h"

namespace lm::train {
namespace {
namespace fs = std::filesystem;

using Params = std::vector<std::pair<std::string, torch::Tensor>>;

Params two_params() {
  torch::manual_seed(5);
  return {{"w", torch::randn({16, 8}).requires_grad_(true)}, {"b", torch::randn({8}).requires_grad_(true)}};
}

void set_grads(const Params& ps, int s) {
  for (auto& [n, p] : ps) p.mutable_grad() = torch::full_like(p, 0.05 * s) + 0.01 * torch::arange(p.numel()).view_as(p);
}

TEST(Step, AdamWFoundInfSkipsTheUpdateOnTheDevice) {
  TrainConfig c;
  auto a = two_params(), b = two_params();
  AdamW oa(a, c), ob(b, c);
  for (int s = 1; s <= 3; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    oa.step(1e-2);  // no flag: the old call
    ob.step(1e-2, torch::zeros({}, torch::kFloat32));
  }
  // found_inf 0 is the plain update, bit for bit (moments and bias correction included).
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  EXPECT_EQ(ob.steps_taken(), 3);
  // found_inf 1: parameters, moments and the step count stay exactly as they were.
  auto before = b[0].second.detach().clone();
  auto state_before = ob.state();
  set_grads(b, 9);
  ob.step(1e-2, torch::ones({}, torch::kFloat32));
  EXPECT_TRUE(torch::equal(b[0].second, before));
  EXPECT_EQ(ob.steps_taken(), 3);
  auto state_after = ob.state();
  for (size_t i = 0; i < state_before.size(); ++i)
    EXPECT_TRUE(torch::equal(state_before[i].second, state_after[i].second)) << state_before[i].first;
  // And the next good step equals the other optimizer's 4th step.
  set_grads(a, 4);
  set_grads(b, 4);
  oa.step(1e-2);
  ob.step(1e-2, torch::zeros({}, torch::kFloat32));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

// The update with the learning rate read from a device tensor (what every CUDA step and a CUDA
// graph's replay use) equals the update with the number, up to lr's float32 rounding; set_lr's
// new value is what the next step reads.
TEST(Step, AdamWReadsTheLearningRateSetOnTheDevice) {
  TrainConfig c;
  auto a = two_params(), b = two_params();
  AdamW oa(a, c), ob(b, c);
  for (int s = 1; s <= 4; ++s) {
    const double lr = 1e-2 * s;  // changes every step, as in a warm-up
    set_grads(a, s);
    set_grads(b, s);
    oa.step(lr, torch::zeros({}, torch::kFloat32));
    ob.set_lr(lr);
    ob.step_device_lr(torch::zeros({}, torch::kFloat32));
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LT((a[i].second - b[i].second).abs().max().item<double>(), 1e-6) << a[i].first;
  EXPECT_EQ(ob.steps_taken(), 4);
}

TEST(Step, ClipGradNormOnTheDeviceNamesTheFirstNonFiniteGradient) {
  auto ps = two_params();
  std::vector<torch::Tensor> plist = {torch::zeros({3}, torch::requires_grad()), ps[0].second, ps[1].second};
  set_grads(ps, 1);  // plist[0] has no gradient: skipped, and `present` maps around it
  const double want = std::hypot(ps[0].second.grad().norm().item<double>(), ps[1].second.grad().norm().item<double>());
  auto g0 = ps[0].second.grad().clone();
  GradNorm n = clip_grad_norm(plist, 0.5);
  EXPECT_NEAR(n.total.item<double>(), want, 1e-6 * want);
  EXPECT_EQ(n.first_bad.item<int64_t>(), -1);
  EXPECT_EQ(n.present, (std::vector<int64_t>{1, 2}));
  // Clipped to norm 0.5 by min(1, 0.5 / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_.
  const double coef = 0.5 / (n.total.item<double>() + 1e-6);
  EXPECT_LT((ps[0].second.grad() - g0 * coef).abs().max().item<double>(), 1e-6);
  // Below max_norm nothing changes, bit for bit.
  set_grads(ps, 1);
  auto g1 = ps[1].second.grad().clone();
  clip_grad_norm(plist, 1e9);
  EXPECT_TRUE(torch::equal(ps[1].second.grad(), g1));
  // A NaN in the second present gradient: total non-finite, first_bad 1 (-> plist[2]).
  ps[1].second.grad()[3] = std::numeric_limits<float>::quiet_NaN();
  GradNorm bad = clip_grad_norm(plist, 1.0);
  EXPECT_FALSE(std::isfinite(bad.total.item<double>()));
  EXPECT_EQ(bad.first_bad.item<int64_t>(), 1);
  ps[0].second.grad()[0][0] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(clip_grad_norm(plist, 1.0).first_bad.item<int64_t>(), 0);
}

class StepRun : public ::testing::Test {
 protected:
  void SetUp() override { init_output(/*quiet=*/true); }
  FitRequest request(const std::string& name, int64_t steps) {
    FitRequest r;
    const auto dir = fs::temp_directory_path() / ("lm_step_test_" + std::to_string(getpid())) / name;
    fs::remove_all(dir);
    r.run_dir = dir.string();
    r.model = *model::preset("tiny");
    r.train.steps = steps;
    r.train.batch.micro_batch = 2;
    r.train.batch.seq_len = 16;
    r.train.schedule.warmup_steps = 2;
    r.train.logging.interval = 5;
    r.train.eval.interval = 0;
    r.train.checkpoint.interval = 10;
    r.train.hardware.threads = 1;
    r.train.debug.verify_at_start = false;
    r.tokenizer_hash = "tok-test";
    return r;
  }
  absl::StatusOr<FitSummary> run(const FitRequest& r) {
    testing::SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
    return fit(r, src, {});
  }
};

TEST_F(StepRun, TheLoopReadsStepResultsOnlyOnLogCheckpointAndStopSteps) {
  // 30 steps, a line every 5, a checkpoint every 10: reads at 5, 10, ..., 30 (the checkpoints
  // at 10 and 20 fall on log steps, the final one finds nothing unread). A read per step would be 30.
  auto r = request("reads", 30);
  auto s = run(r);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->host_reads, 6);
  EXPECT_EQ(s->losses.size(), 30u);  // every step's loss still arrives, in order
  // A stop between log steps reads once more (step 12), so its checkpoint holds step 12's state.
  auto st = request("reads_stop", 30);
  st.train.stop_at_step = 12;
  auto s2 = run(st);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->host_reads, 3);
  EXPECT_EQ(s2->losses.size(), 12u);
}

TEST_F(StepRun, ANonFiniteStepBetweenReadsIsSkippedNamedAndLogged) {
  // The NaN gradient at step 7 (1-based) is learnt of at the step-10 read: the error names step 7
  // and its parameter, and the step-10 checkpoint is not written (latest stays none).
  auto r = request("late_nan", 30);
  r.train.debug.inject_nan_step = 6;
  auto s = run(r);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_NE(msg.find("step 7: non-finite gradient"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("last good checkpoint: none yet"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(r.run_dir + "/checkpoints/step-00000010"));
}

// train.hardware.cuda_graphs where no graph can run (a CPU): the run says why and trains eagerly,
// bit for bit as without it. (Graphs themselves: Gpu.CudaGraphReplaysUseTheCurrentLearningRate.)
TEST_F(StepRun, CudaGraphsOnACpuSayWhyAndTrainEagerly) {
  auto plain = request("graphs_plain", 4);
  auto a = run(plain);
  ASSERT_TRUE(a.ok()) << a.status();
  auto r = request("graphs_cpu", 4);
  r.train.hardware.cuda_graphs = true;
  init_output(/*quiet=*/false);
  ::testing::internal::CaptureStderr();
  auto b = run(r);
  const std::string log = ::testing::internal::GetCapturedStderr();
  init_output(/*quiet=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(log.find("train.hardware.cuda_graphs: on, but they need a CUDA device (device cpu): steps run eagerly"),
            std::string::npos)
      << log;
  EXPECT_EQ(b->losses, a->losses);
  EXPECT_TRUE(StepGraph::supported() || !torch::cuda::is_available());
}

}  // namespace
}  // namespace lm::train

namespace lm::train {
namespace {

TEST_F(StepRun, ABrokenFastPathFallsBackAtStartUpAndSaysSoInEveryLine) {
  model::set_debug_break_fast_path("attention.sdpa");
  auto r = request("fallback", 5);
  r.train.debug.verify_at_start = true;
  init_output(/*quiet=*/false);  // the default log, no -v: a failing check is said in full there
  ::testing::internal::CaptureStderr();
  auto s = run(r);
  const std::string log = ::testing::internal::GetCapturedStderr();
  init_output(/*quiet=*/true);
  model::set_debug_break_fast_path("");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(log.find("warn] fast path attention.sdpa: MISMATCH"), std::string::npos) << log;
  EXPECT_NE(log.find("warn] start-up checks: 1 of "), std::string::npos) << log;
  EXPECT_NE(log.find("fast paths FAILED and train on their reference (slower, correct): attention.sdpa"),
            std::string::npos) << log;
  EXPECT_EQ(log.find("] fast path loss.chunked: ok"), std::string::npos) << "a passing check is a -v line: " << log;
  EXPECT_EQ(s->fast_path_fallback, std::vector<std::string>{"attention.sdpa"});
  EXPECT_NE(s->summary().find("WARNING: trained with the reference"), std::string::npos) << s->summary();
  auto rows = read_metrics(r.run_dir + "/metrics.jsonl");
  ASSERT_TRUE(rows.ok() && !rows->empty());
  for (const auto& m : *rows) EXPECT_EQ(m["fast_path_fallback"], Json::array({"attention.sdpa"})) << m.dump();
}

// train.hardware.fast_paths_off keeps a named path on its reference from the start: with a break
// planted in the chunked loss, the start-up check has nothing to catch (the path is not used) and
// the losses are the clean run's (the break would put them 5% off); an unknown name is refused.
TEST_F(StepRun, FastPathsOffKeepsTheNamedPathOnItsReference) {
  auto clean = request("off_clean", 3);
  auto c = run(clean);
  ASSERT_TRUE(c.ok()) << c.status();
  // The same for one of lmforge's CPU kernels (on by default on a CPU).
  for (const std::string path : {"loss.chunked", "swiglu.cpu"}) {
    model::set_debug_break_fast_path(path);
    auto r = request("off_" + path, 3);
    r.train.debug.verify_at_start = true;
    r.train.hardware.fast_paths_off = {path};
    auto s = run(r);
    model::set_debug_break_fast_path("");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->fast_path_fallback.empty()) << path << ": " << absl::StrJoin(s->fast_path_fallback, ", ");
    ASSERT_EQ(s->losses.size(), c->losses.size());
    for (size_t i = 0; i < c->losses.size(); ++i)
      EXPECT_NEAR(s->losses[i], c->losses[i], 1e-5 * c->losses[i]) << path << " " << i;
  }

  auto bad = request("off_bad", 1);
  bad.train.hardware.fast_paths_off = {"loss.fast"};
  auto e = run(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message())
                .find("train.hardware.fast_paths_off: unknown fast path 'loss.fast' (known: attention.sdpa, "
                      "rms_norm.aten, loss.chunked, swiglu.cuda, rope.cuda, add_rms_norm.cuda, rms_norm.cpu, "
                      "add_rms_norm.cpu, swiglu.cpu, rope.cpu, attention.cpu, cross_entropy.cpu)"),
            std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace lm::train

namespace lm::train {
namespace {

TEST(Peak, H100PcieAndNvlAreNotCreditedWithTheSxmPeak) {
  // nvidia-smi names: SXM "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL".
  EXPECT_EQ(find_gpu("NVIDIA H100 80GB HBM3")->bf16_flops, 989e12);
  EXPECT_EQ(find_gpu("NVIDIA H100 PCIe")->bf16_flops, 756e12);
  EXPECT_EQ(find_gpu("NVIDIA H100 NVL")->bf16_flops, 835e12);
  EXPECT_EQ(find_gpu("NVIDIA H200")->bf16_flops, 989e12);
}

}  // namespace
}  // namespace lm::train

namespace lm::train {
namespace {

TEST_F(StepRun, AnUnknownSdpaBackendIsRefusedNamingTheField) {
  auto r = request("sdpa", 2);
  r.train.hardware.sdpa_backend = "fast";
  auto s = run(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("train.hardware.sdpa_backend: unknown backend 'fast'"), std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace lm::train
