// lmtrain plan's arithmetic: counts agree with the model's own, the memory and time lines add
// up, and the reference report's run gives back the MFU its figures imply.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "model/config.h"
#include "model/transformer.h"
#include "train/device.h"
#include "train/plan.h"
#include "app/fit_flags.h"
#include "train/config.h"
#include "tests/train/plan_shapes.h"

namespace lm::train {
namespace {

TEST(Plan, CountsAgreeWithTheModelForEveryPreset) {
  for (const auto& name : model::preset_names()) {
    auto cfg = model::preset(name);
    ASSERT_TRUE(cfg.ok()) << name;
    PlanRequest req;
    req.model = *cfg;
    auto p = make_plan(req);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_EQ(p->params, model::param_count(*cfg)) << name;
    EXPECT_EQ(p->matmul_params, model::matmul_param_count(*cfg)) << name;
    // At the sequence fit trains with: the preset's (small: 128 of its 256; the GPU presets: their max).
    const int64_t seq = model::preset_training(name).seq_len;
    EXPECT_EQ(p->seq_len, seq) << name;
    EXPECT_DOUBLE_EQ(p->flops_per_token, model::train_flops_per_token(*cfg, seq)) << name;
    EXPECT_DOUBLE_EQ(p->total_flops, p->flops_per_token * req.tokens) << name;
    // 16 bytes per parameter: fp32 weights, grads and two AdamW moments; 2 per matmul weight: the
    // bf16 copies autocast keeps; data parallel adds the fp32 bucket of every gradient.
    EXPECT_DOUBLE_EQ(p->memory.weights + p->memory.grads + p->memory.optimizer, 16.0 * p->params) << name;
    EXPECT_DOUBLE_EQ(p->memory.weight_copies, 2.0 * p->matmul_params) << name;
    EXPECT_EQ(p->memory.grad_buckets, 0) << name;
    req.n_gpus = 8;
    EXPECT_DOUBLE_EQ(make_plan(req)->memory.grad_buckets, 4.0 * p->params) << name;
  }
}

TEST(Plan, ParamCountMatchesTheBuiltModule) {
  // The model's own count, by building it (small presets only: 124m+ would take seconds and GBs).
  for (const char* name : {"tiny", "small"}) {
    auto cfg = model::preset(name);
    ASSERT_TRUE(cfg.ok());
    model::Transformer m(*cfg);
    int64_t n = 0;
    for (const auto& p : m->parameters()) n += p.numel();
    PlanRequest req;
    req.model = *cfg;
    EXPECT_EQ(make_plan(req)->params, n) << name;
  }
}

TEST(Plan, ReferenceRunImpliedMfu) {
  // The reference report: 0.4B parameters, 2B tokens, one H100, 54.6 h, $164.
  // Its implied MFU is ~2.5% by 6·N·D with N = 0.4B; with our 400m preset's exact N
  // (392.7M) the same rule gives 2.42%. Tolerance ±0.15 points: the report rounds N and hours.
  auto cfg = model::preset("400m");
  ASSERT_TRUE(cfg.ok());
  PlanRequest req;
  req.model = *cfg;
  req.tokens = 2e9;
  req.gpu = "h100";
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->peak_flops, 989e12);
  const double six_nd = implied_mfu(2e9, 6.0 * 0.4e9, 54.6, 1, p->peak_flops);
  EXPECT_NEAR(six_nd, 0.025, 0.0015);
  const double ours = implied_mfu(2e9, 6.0 * static_cast<double>(p->params), 54.6, 1, p->peak_flops);
  EXPECT_NEAR(ours, 0.0242, 0.0015);
  // The plan's time at that MFU and FLOPs/token gives back the 54.6 h (round trip).
  req.mfu = implied_mfu(2e9, p->flops_per_token, 54.6, 1, p->peak_flops);
  req.price_per_hour = 164.0 / 54.6;
  auto back = make_plan(req);
  ASSERT_TRUE(back.ok());
  EXPECT_NEAR(back->seconds / 3600.0, 54.6, 1e-6);
  EXPECT_NEAR(back->cost, 164.0, 1e-6);
}

TEST(Plan, MicroBatchThatFitsRespectsMemory) {
  auto cfg = model::preset("400m");
  ASSERT_TRUE(cfg.ok());
  PlanRequest req;
  req.model = *cfg;
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok());
  ASSERT_GT(p->max_micro_batch, 0);
  const double fixed = p->memory.fixed();
  EXPECT_DOUBLE_EQ(fixed, 16.0 * p->params + 2.0 * p->matmul_params) << "one GPU: no gradient buckets";
  EXPECT_LE(fixed + activation_bytes(*cfg, p->max_micro_batch, 2048), 0.9 * 80e9);
  EXPECT_GT(fixed + activation_bytes(*cfg, 2 * p->max_micro_batch, 2048), 0.9 * 80e9);
  EXPECT_TRUE(p->fits);
  // The reference attention saves the T×T scores: more memory than the fused path.
  auto ref = *cfg;
  ref.attention = "reference";
  EXPECT_GT(activation_bytes(ref, 4, 2048), activation_bytes(*cfg, 4, 2048));
}

TEST(Plan, AMicroBatchThatDoesNotFitIsSaidWithTheLargestThatDoes) {
  // Issue 21: `plan --micro-batch 64` on 400m printed a 249 GB total for an 80 GB card and went on.
  PlanRequest req;
  req.model = *model::preset("400m");
  req.micro_batch = 64;
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->fits);
  // 249 GB in the report; 139 GB since the head's activations are counted as the chunked
  // loss keeps them (2V bytes per token, not 16V).
  EXPECT_NEAR(p->memory.total() / 1e9, 139, 1);
  const std::string text = format_plan(*p, req);
  EXPECT_NE(text.find("micro-batch 64 DOES NOT FIT; the largest power of two that fits is 16 (--micro-batch 16)"),
            std::string::npos) << text;
  req.micro_batch = 16;  // the suggestion fits
  p = make_plan(req);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fits);
  EXPECT_EQ(format_plan(*p, req).find("DOES NOT FIT"), std::string::npos) << format_plan(*p, req);
  // Not even one sequence: nothing to suggest but a shorter sequence, a smaller model or more memory.
  req.micro_batch = 0;
  req.model = *model::preset("1b");
  req.gpu = "4090";
  p = make_plan(req);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_EQ(p->max_micro_batch, 0);
  EXPECT_NE(format_plan(*p, req).find("DOES NOT FIT even at micro-batch 1"), std::string::npos) << format_plan(*p, req);
}

TEST(Plan, NoShardingBeyondZeroOneIsPromised) {
  // lmforge shards AdamW's moments (ZeRO-1) and nothing else: a plan that does not fit never
  // points at weight or gradient sharding.
  for (const char* gpu : {"h100", "4090"}) {
    PlanRequest req;
    req.model = *model::preset("1b");
    req.gpu = gpu;
    auto p = make_plan(req);
    ASSERT_TRUE(p.ok());
    const std::string text = format_plan(*p, req);
    for (const char* promise : {"ZeRO-2", "ZeRO-3", "FSDP", "--zero 2", "--zero 3"})
      EXPECT_EQ(text.find(promise), std::string::npos) << gpu << ": " << promise << "\n" << text;
  }
}

// ZeRO-1 on 8 GPUs: a GPU keeps 1/8 of AdamW's 8N bytes and a 4N/8 gradient shard beside the
// buckets (train/optimizer_shards.h); the fit line asks for it. On one GPU it changes nothing.
TEST(Plan, ZeroOneCountsAnEighthOfTheMomentsOnEightGpus) {
  PlanRequest req;
  req.model = *model::preset("1b");
  req.n_gpus = 8;
  auto plain = make_plan(req);
  req.zero = true;
  auto zero = make_plan(req);
  ASSERT_TRUE(plain.ok() && zero.ok());
  const double n = static_cast<double>(zero->params);
  EXPECT_DOUBLE_EQ(plain->memory.optimizer, 8 * n);
  EXPECT_DOUBLE_EQ(zero->memory.optimizer, 8 * n / 8);
  EXPECT_DOUBLE_EQ(zero->memory.grad_buckets, 4 * n + 4 * n / 8);
  // ZeRO-1 keeps no .grad (the buckets hold the gradients): 4N less, but the embedding's gradient
  // in flight (1b is tied: 8·V·d).
  EXPECT_DOUBLE_EQ(zero->memory.grads, 0);
  const double vd = static_cast<double>(req.model.vocab_size * req.model.d_model);
  EXPECT_DOUBLE_EQ(zero->memory.grad_transient, (req.model.tie_embeddings ? 8 : 4) * vd);
  EXPECT_NEAR(plain->memory.total() - zero->memory.total(),
              8 * n * 7 / 8 - 4 * n / 8 + 4 * n - zero->memory.grad_transient, 1);
  EXPECT_NE(fit_command(*zero, req).find("--zero 1"), std::string::npos) << fit_command(*zero, req);
  EXPECT_EQ(fit_command(*plain, req).find("--zero"), std::string::npos);
  req.n_gpus = 1;
  auto one = make_plan(req);
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->memory.optimizer, 8 * n);
  EXPECT_EQ(fit_command(*one, req).find("--zero"), std::string::npos);
}

// ZeRO-1 adds no FLOPs: where plain data parallel cannot reach a useful micro-batch and ZeRO-1
// fits more, it comes before recompute; where plain fits, nothing is added.
TEST(Plan, ZeroOneIsChosenBeforeRecomputeWhereItFitsMore) {
  PlanRequest req;
  req.model = *model::preset("400m");
  req.n_gpus = 8;
  std::string strategies;
  auto p = make_cheapest_plan(req, &strategies);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(req.zero) << strategies;
  EXPECT_NE(strategies.find("+ ZeRO-1 "), std::string::npos) << strategies;  // listed with its cost
  req.model = *model::preset("1b");
  req.gpu = "4090";
  p = make_cheapest_plan(req, &strategies);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(req.zero) << strategies;
  EXPECT_TRUE(p->fits) << format_plan(*p, req);
  EXPECT_NE(fit_command(*p, req).find("--zero 1"), std::string::npos) << fit_command(*p, req);
  EXPECT_NE(strategies.find("chosen: data parallel + ZeRO-1"), std::string::npos) << strategies;
}

TEST(Plan, RecomputeIsChosenOnlyWherePlainDataParallelDoesNotFit) {
  PlanRequest req;
  req.model = *model::preset("400m");
  std::string strategies;
  auto p = make_cheapest_plan(req, &strategies);  // an 80 GB H100: the preset's micro-batch fits
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(req.recompute) << strategies;
  EXPECT_NE(strategies.find("chosen: data parallel)"), std::string::npos) << strategies;
  req.model = *model::preset("1b");
  req.gpu = "4090";  // 24 GB: plain fits 1 sequence of 2048, recompute more
  p = make_cheapest_plan(req, &strategies);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(req.recompute) << strategies;
  EXPECT_TRUE(p->fits) << format_plan(*p, req);
  EXPECT_GT(p->memory.recompute_block, 0);
  EXPECT_NE(fit_command(*p, req).find("--recompute on"), std::string::npos) << fit_command(*p, req);
  EXPECT_NE(strategies.find("~1.33x step time"), std::string::npos) << strategies;
  // The time counts the extra forward.
  PlanRequest off = req;
  off.recompute = false;
  EXPECT_NEAR(p->seconds / make_plan(off)->seconds, 4.0 / 3.0, 1e-9);
}

TEST(Plan, H100VariantsHaveTheirOwnPeaksAndMemoryAsAtRunTime) {
  // Dense bf16 peaks of the data sheets: SXM 989, PCIe 756, NVL 835 TFLOP/s; NVL has 94 GB.
  struct Case { const char* name; double tflops, gb; const char* nvidia_smi; };
  for (const Case& c : {Case{"h100", 989, 80, "NVIDIA H100 80GB HBM3"}, Case{"h100-sxm", 989, 80, "NVIDIA H100 80GB HBM3"},
                        Case{"h100-pcie", 756, 80, "NVIDIA H100 PCIe"}, Case{"H100_PCIe", 756, 80, "NVIDIA H100 PCIe"},
                        Case{"h100-nvl", 835, 94, "NVIDIA H100 NVL"}, Case{"NVIDIA H100 NVL", 835, 94, "NVIDIA H100 NVL"},
                        Case{"h200", 989, 141, "NVIDIA H200"}, Case{"a100", 312, 80, "NVIDIA A100-SXM4-80GB"}}) {
    PlanRequest req;
    req.model = *model::preset("400m");
    req.gpu = c.name;
    auto p = make_plan(req);
    ASSERT_TRUE(p.ok()) << c.name << ": " << p.status();
    EXPECT_DOUBLE_EQ(p->peak_flops, c.tflops * 1e12) << c.name;
    EXPECT_DOUBLE_EQ(p->memory_per_gpu, c.gb * 1e9) << c.name;
    // The trainer's MFU reads the row of nvidia-smi's name (device_peak): the same row.
    EXPECT_EQ(find_gpu(c.nvidia_smi), gpu_by_name(c.name)) << c.name << " vs " << c.nvidia_smi;
  }
  // Every table row has a plan name that finds it back.
  for (const auto& name : gpu_names()) EXPECT_NE(gpu_by_name(name), nullptr) << name;
  // A near miss is an error listing the names, not the SXM row by substring.
  PlanRequest req;
  req.model = *model::preset("400m");
  req.gpu = "h100-pci";
  auto p = make_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("h100-pcie, h100-nvl, h100"), std::string::npos) << p.status();
}

TEST(Plan, BadInputNamesTheFlag) {
  PlanRequest req;
  req.model = *model::preset("tiny");
  req.gpu = "tpu-v9";
  auto p = make_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("--gpu"), std::string::npos) << p.status();
  EXPECT_NE(std::string(p.status().message()).find("h100"), std::string::npos) << p.status();
  req.gpu = "h100";
  req.mfu = 45;  // percent instead of fraction
  EXPECT_EQ(make_plan(req).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(find_gpu("NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_STREQ(find_gpu("NVIDIA A100-SXM4-80GB")->key, "a100");  // not the A10 row
}

}  // namespace
}  // namespace lm::train

namespace lm::train {
namespace {

TEST(Plan, ThreeBillionOnEightH100sIsNotPromisedUnderDdp) {
  PlanRequest req;
  req.model = open_llama_3b();
  req.n_gpus = 8;
  req.seq_len = 2048;
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_micro_batch, 0) << format_plan(*p, req);
  EXPECT_FALSE(p->fits);
  EXPECT_GT(p->memory.total() / 1e9, 80) << "weights, grads, moments, bf16 copies and buckets of 3.4B parameters";
}

TEST(Plan, SeveralNodesGetARendezvousAndAnSbatchFile) {
  PlanRequest req;
  req.model = *model::preset("1b");
  req.n_gpus = 32;
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(nodes(req), 4);
  const std::string fit = fit_command(*p, req);
  EXPECT_EQ(fit.rfind("torchrun --no-python --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "
                      "\"$MASTER_ADDR:29500\" --rdzv-id lmforge lmtrain fit --data", 0), 0u) << fit;
  EXPECT_EQ(fit.find("--nproc-per-node 32"), std::string::npos) << "a single-node command for 32 GPUs";
  const std::string docker = docker_command(*p, req);
  EXPECT_NE(docker.find("--network host -e MASTER_ADDR"), std::string::npos) << docker;
  const std::string sb = sbatch_script(*p, req);
  for (const char* line : {"#SBATCH --nodes=4\n", "#SBATCH --gpus-per-node=8\n", "#SBATCH --requeue\n",
                           "export MASTER_ADDR=$(scontrol show hostnames", "srun torchrun --no-python --nnodes 4"})
    EXPECT_NE(sb.find(line), std::string::npos) << line << " in\n" << sb;
  EXPECT_NE(format_plan(*p, req).find("nodes: 4 × 8 GPUs"), std::string::npos) << format_plan(*p, req);
  req.n_gpus = 8;  // one node: no rendezvous
  EXPECT_EQ(fit_command(*make_plan(req), req).rfind("torchrun --no-python --nproc-per-node 8 lmtrain fit", 0), 0u);
  req.n_gpus = 12;  // a part-used node
  EXPECT_NE(make_plan(req).status().message().find("--gpus-per-node"), std::string::npos);
}

TEST(Plan, TheStopTimeoutCoversWritingTheCheckpoint) {
  PlanRequest req;
  req.model = open_llama_3b();
  req.model.n_layers = 64;  // ~7B: an 84 GB checkpoint
  req.model.d_model = 4096;
  req.model.n_heads = 32;
  req.model.n_kv_heads = 32;
  req.model.d_ff = 11008;
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(checkpoint_bytes(*p), 80e9);
  EXPECT_GE(stop_timeout_s(*p), kStopMarginS + checkpoint_bytes(*p) / kCheckpointWriteBytesPerS);
  EXPECT_GT(stop_timeout_s(*p), 120);
  EXPECT_NE(docker_command(*p, req).find(absl::StrCat("--stop-timeout ", stop_timeout_s(*p), " ")), std::string::npos);
  req.model = *model::preset("small");  // a small checkpoint keeps the floor
  EXPECT_EQ(stop_timeout_s(*make_plan(req)), 120);
}

TEST(Plan, TheMfuSaysWhereItComesFrom) {
  PlanRequest req;
  req.model = *model::preset("400m");
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(format_plan(*p, req).find("time at MFU 40.0% (assumed, not measured"), std::string::npos)
      << format_plan(*p, req);
  req.mfu_source = "given with --mfu";
  EXPECT_NE(format_plan(*p, req).find("(given with --mfu)"), std::string::npos);
}

TEST(Plan, AModelFromAConfigFileIsNamedAndTrainedFromIt) {
  PlanRequest req;
  req.model = *model::preset("400m");
  req.model.n_layers = 32;
  req.model_source = "configs/deep.json";
  auto p = make_plan(req);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(format_plan(*p, req).find("model 400m + configs/deep.json:"), std::string::npos) << format_plan(*p, req);
  const std::string fit = fit_command(*p, req);
  EXPECT_NE(fit.find("--preset 400m --config configs/deep.json --out /runs/deep "), std::string::npos) << fit;
}

}  // namespace
}  // namespace lm::train

// ---- The presets' GPU defaults and `lmtrain plan` agree (issue 22) -----------------------------

namespace lm::train {
namespace {

// Parses `lmtrain plan`'s fit arguments with fit's own flag definitions (app/fit_flags.h) and
// resolves them as fit does: preset defaults < flags, device auto on a machine with a GPU.
TrainConfig resolve_plan_fit_command(const Plan& plan, const model::ModelConfig& m, int world) {
  CLI::App app("fit");
  TrainOverrides flags;
  std::string data, out, preset, resume;
  app.add_option("--data", data)->required();
  app.add_option("--out", out)->required();
  app.add_option("--preset", preset)->required();
  app.add_option("--resume", resume)->expected(0, 1);
  app::add_train_flags(&app, flags);
  std::vector<std::string> args(plan.fit_args.rbegin(), plan.fit_args.rend());  // CLI11 parses a reversed vector
  app.parse(args);
  EXPECT_EQ(preset, m.preset);
  EXPECT_EQ(resume, "auto") << "the printed command must survive a preemption as it is";
  TrainConfig tc = preset_train_config(preset);
  EXPECT_TRUE(flags.apply(tc).ok());
  resolve_hardware(tc, /*cuda_available=*/true);
  EXPECT_TRUE(resolve(tc, m, world).ok()) << m.preset;
  return tc;
}

// The presets' micro-batches were sized by the plan's first, larger activation estimate (16V bytes
// per token for the head). The counted one (plan_memory_test.cpp) lets 124m and 1b fit twice as
// many sequences, but no lmforge step has run on a GPU yet: the presets stay where they are, which
// fits with room, until a GPU measures the peak (issue 39) and they can be raised on evidence.
TEST(PresetDefaults, GpuPresetsUseAMicroBatchThatFitsTheirGpu) {
  for (const char* name : {"124m", "400m", "1b"}) {
    const model::PresetTraining d = model::preset_training(name);
    PlanRequest req;
    req.model = *model::preset(name);
    req.gpu = d.hardware;
    auto p = make_plan(req);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    // The preset's micro-batch fits an 80 GB H100 by the plan's estimate, and wastes at most half of it.
    EXPECT_GE(p->max_micro_batch, d.micro_batch) << name;
    EXPECT_LE(p->max_micro_batch, 2 * d.micro_batch) << name;
    EXPECT_EQ(p->micro_batch, d.micro_batch) << name;
    EXPECT_EQ(d.seq_len, req.model.max_seq_len) << name;
    EXPECT_EQ(d.checkpoint_interval, 0) << name << ": GPU presets checkpoint by minutes";
    EXPECT_GT(d.checkpoint_minutes, 0) << name;
  }
  EXPECT_STREQ(model::preset_training("small").hardware, "cpu");
  EXPECT_EQ(preset_train_config("small").batch.micro_batch, TrainConfig().batch.micro_batch);  // the CPU demo unchanged
}

TEST(PresetDefaults, PlanFitCommandResolvesToThePlan) {
  struct Case { const char* preset; const char* gpu; int gpus; bool bare; bool zero = false; bool sharded = false; };
  // bare: the renter's command carries no training flags (the preset's defaults are the plan).
  for (const Case& c : {Case{"124m", "h100", 1, true}, Case{"400m", "h100", 1, true}, Case{"400m", "h200", 8, true},
                        Case{"1b", "h100", 8, true}, Case{"400m", "4090", 1, false}, Case{"400m", "h100", 3, false},
                        Case{"small", "a10", 1, false}, Case{"1b", "4090", 8, false, true},
                        Case{"1b", "4090", 8, false, true, true}}) {
    SCOPED_TRACE(absl::StrCat(c.preset, " on ", c.gpus, " x ", c.gpu, c.zero ? " ZeRO-1" : "", c.sharded ? " sharded master" : ""));
    PlanRequest req;
    req.zero = c.zero;
    req.sharded_master = c.sharded;
    req.model = *model::preset(c.preset);
    const model::PresetTraining d = model::preset_training(c.preset);
    req.tokens = d.tokens > 0 ? d.tokens : 2e9;
    req.gpu = c.gpu;
    req.n_gpus = c.gpus;
    auto p = make_plan(req);
    ASSERT_TRUE(p.ok()) << p.status();
    const TrainConfig tc = resolve_plan_fit_command(*p, req.model, c.gpus);
    EXPECT_EQ(tc.batch.micro_batch, p->micro_batch);
    EXPECT_EQ(tc.batch.seq_len, p->seq_len);
    EXPECT_EQ(tc.batch.grad_accum, p->grad_accum);
    EXPECT_EQ(tokens_per_step(tc, c.gpus), p->step_tokens);
    EXPECT_EQ(static_cast<double>(tc.tokens), req.tokens);
    EXPECT_EQ(tc.hardware.device, "cuda");
    EXPECT_EQ(tc.hardware.dtype, "bf16");
    EXPECT_TRUE(tc.hardware.tf32);
    EXPECT_EQ(tc.distributed.zero, c.zero ? 1 : 0);
    EXPECT_EQ(tc.distributed.master_weights, c.sharded ? "sharded" : "whole");
    EXPECT_LE(p->micro_batch, std::max<int64_t>(1, p->max_micro_batch)) << "the plan's micro-batch must fit";
    if (c.bare) {
      EXPECT_EQ(p->fit_args.size(), 8u) << fit_command(*p, req);
      EXPECT_EQ(p->step_tokens, d.batch_tokens);
    } else {
      EXPECT_GT(p->fit_args.size(), 8u) << fit_command(*p, req);
    }
    const std::string docker = docker_command(*p, req);
    EXPECT_NE(docker.find("--gpus all --ipc=host"), std::string::npos) << docker;
    EXPECT_NE(docker.find(fit_command(*p, req).substr(fit_command(*p, req).find(" --data"))), std::string::npos);
  }
}

TEST(PresetDefaults, HardwareAutoAndPrecedence) {
  TrainConfig gpu;
  EXPECT_NE(resolve_hardware(gpu, true).find("auto"), std::string::npos);
  EXPECT_EQ(gpu.hardware.device, "cuda");
  EXPECT_EQ(gpu.hardware.dtype, "bf16");
  TrainConfig cpu;
  resolve_hardware(cpu, false);
  EXPECT_EQ(cpu.hardware.device, "cpu");
  EXPECT_EQ(cpu.hardware.dtype, "fp32");
  TrainConfig asked;  // flags given explicitly still win
  TrainOverrides o;
  o.items = {{"hardware.device", "cpu", "--device"}, {"hardware.dtype", "bf16", "--dtype"}};
  ASSERT_TRUE(o.apply(asked).ok());
  resolve_hardware(asked, true);
  EXPECT_EQ(asked.hardware.device, "cpu");
  EXPECT_EQ(asked.hardware.dtype, "bf16");
  // --steps clears the preset's token budget; --grad-accum its batch_tokens; a config file alike.
  TrainConfig t = preset_train_config("400m");
  TrainOverrides s;
  s.items = {{"steps", "50", "--steps"}, {"batch.grad_accum", "2", "--grad-accum"}};
  ASSERT_TRUE(s.apply(t).ok());
  EXPECT_EQ(t.tokens, 0);
  EXPECT_EQ(t.batch.batch_tokens, 0);
  TrainConfig f = preset_train_config("400m");
  clear_shadowed(Json{{"steps", 10}}, f);
  EXPECT_EQ(f.tokens, 0);
  EXPECT_EQ(f.batch.batch_tokens, 524288);
}

TEST(PresetDefaults, Tf32SwitchSetsTheGlobalContext) {
  set_tf32(true);
  EXPECT_TRUE(tf32_enabled());
  set_tf32(false);
  EXPECT_FALSE(tf32_enabled());
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
}

}  // namespace
}  // namespace lm::train
