// lmtrain plan's memory terms against what a real step allocates: a counting CPU allocator
// (counting_allocator.h) watches the model, bf16 autocast, autograd and AdamW do one training step
// as Trainer::accumulate_gradients does it. Each term of the plan must be within 10% of the bytes
// counted (issue 39: the plan had promised 3B on 8×H100 under DDP, which needs ~85 GB per GPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/transformer.h"
#include "tests/train/counting_allocator.h"
#include "train/config.h"
#include "train/device.h"
#include "train/grad_sync.h"
#include "train/optim.h"
#include "train/optimizer_shards.h"
#include "train/plan.h"

namespace lm::train {
namespace {

// Models large enough that each term is megabytes (the allocator's small tensors vanish in them),
// small enough for a test: GQA, the fused attention and the reference one (which keeps the
// scores), and a second shape where d, kv, f and V all differ, so that no coefficient of the plan's
// formula is right by accident (each was measured by varying one dimension at a time).
std::vector<model::ModelConfig> counted_models() {
  model::ModelConfig a;
  a.vocab_size = 4096;
  a.d_model = 256;
  a.n_layers = 4;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.d_ff = 704;
  a.max_seq_len = 256;
  model::ModelConfig b = a;
  b.vocab_size = 8192;
  b.d_model = 384;
  b.n_layers = 3;
  b.n_heads = 6;
  b.n_kv_heads = 6;
  b.d_ff = 1024;
  b.attention = "reference";
  return {a, b};
}

struct Counted {
  int64_t weights = 0, grads = 0, optimizer = 0, copies = 0, activations = 0, peak = 0;
};

// One model's terms, counted: built, given AdamW, stepped twice under bf16 autocast.
Counted count_step(const model::ModelConfig& cfg, bool recompute, int64_t seq, int64_t micro_batch) {
  Counted c;
  torch::manual_seed(0);
  testing::CountingCpuAllocator counter;
  model::Transformer model(cfg, 1);
  model->set_recompute(recompute);
  c.weights = counter.live();
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
  const int64_t before_opt = counter.live();
  AdamW opt(params, TrainConfig{});
  c.optimizer = counter.live() - before_opt;
  const torch::Device cpu(torch::kCPU);
  // Forward under bf16 autocast at micro-batches 2 and 4, as Trainer::accumulate_gradients runs
  // it: the difference is one micro-batch of 2's activations; the rest of the first forward is
  // the weights' bf16 copies that autocast keeps until the step ends.
  std::map<int64_t, int64_t> forward;
  const int64_t before_grads = counter.live();
  for (int64_t b : {2, 4}) {
    auto window = torch::randint(cfg.vocab_size, {b, seq + 1}, torch::kInt64);
    AutocastGuard ac(cpu, true);
    const int64_t before = counter.live();
    auto loss = model->loss(window);
    forward[b] = counter.live() - before;
    loss.backward();
  }
  c.grads = counter.live() - before_grads;
  c.activations = forward[4] - forward[2];
  c.copies = forward[2] - c.activations;
  opt.step(1e-3);
  // A whole step at the plan's micro-batch from the state between steps (weights, moments, no
  // gradients: zero_grad frees them): its peak is what the plan's total must cover.
  opt.zero_grad();
  counter.reset_peak();
  {
    auto window = torch::randint(cfg.vocab_size, {micro_batch, seq + 1}, torch::kInt64);
    AutocastGuard ac(cpu, true);
    model->loss(window).backward();
  }
  opt.step(1e-3);
  c.peak = counter.peak();
  return c;
}

void expect_within(double measured, double planned, const char* term) {
  std::printf("  %-14s counted %8.2f MB, planned %8.2f MB (%+.1f%%)\n", term, measured / 1e6, planned / 1e6,
              100 * (planned - measured) / measured);
  EXPECT_NEAR(planned, measured, 0.1 * measured) << term << ": the plan is off by more than 10% of what a step allocates";
}

void expect_total_covers_peak(const Counted& c, const MemoryEstimate& m) {
  std::printf("  peak of a step %.2f MB; plan total %.2f MB\n", c.peak / 1e6, m.total() / 1e6);
  // The total holds every gradient and every activation at once; a step frees activations while
  // its gradients arrive (zero_grad freed the last ones), so its peak is below the sum, not far.
  EXPECT_LE(c.peak, m.total()) << "a step needs more than the plan's total";
  EXPECT_GE(c.peak, m.total() * 0.8) << "the plan's total is more than 20% above what a step needs";
}

TEST(PlanMemory, EachTermIsWithinTenPercentOfACountedCpuStep) {
  constexpr int64_t kSeq = 128;
  for (const model::ModelConfig& cfg : counted_models()) {
    SCOPED_TRACE(cfg.attention + " attention, d " + std::to_string(cfg.d_model));
    PlanRequest req;
    req.model = cfg;
    req.seq_len = kSeq;
    req.micro_batch = 2;
    auto plan = make_plan(req);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const MemoryEstimate& m = plan->memory;
    const Counted c = count_step(cfg, false, kSeq, req.micro_batch);
    std::printf("plan vs a counted CPU step (bf16 autocast, %s attention, %lld params, micro-batch 2 x %lld):\n",
                cfg.attention.c_str(), static_cast<long long>(plan->params), static_cast<long long>(kSeq));
    expect_within(c.weights, m.weights, "weights");
    expect_within(c.grads, m.grads, "grads");
    expect_within(c.optimizer, m.optimizer, "optimizer");
    expect_within(c.copies, m.weight_copies, "bf16 copies");
    expect_within(c.activations, m.activations, "activations");
    expect_total_covers_peak(c, m);
  }
}

// With recompute the forward keeps each block's inputs and the head's tensors; backward rebuilds
// one block at a time (recompute_block), and autocast's bf16 weight copies are made there.
TEST(PlanMemory, RecomputeTermsAreWithinTenPercentOfACountedCpuStep) {
  constexpr int64_t kSeq = 128;
  const model::ModelConfig cfg = counted_models()[0];
  PlanRequest req;
  req.model = cfg;
  req.seq_len = kSeq;
  req.micro_batch = 2;
  req.recompute = true;
  auto plan = make_plan(req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Counted c = count_step(cfg, true, kSeq, req.micro_batch);
  std::printf("plan vs a counted CPU step with recompute (micro-batch 2 x %lld):\n", static_cast<long long>(kSeq));
  expect_within(c.activations, plan->memory.activations, "block inputs");
  const Counted without = count_step(cfg, false, kSeq, req.micro_batch);
  EXPECT_LT(c.activations * 2, without.activations) << "recompute must at least halve what the forward keeps";
  expect_total_covers_peak(c, plan->memory);
}

// The distributed optimizer's terms (train/optimizer_shards.h, --zero 1 --master-weights sharded),
// counted as rank 0 of 2 runs them: OptimizerShards with the matmul weights as bf16 working
// weights, AdamW on this rank's parts, GradSync summing the micro-batches into the fp32 buckets.
// The collectives are stand-ins that move this rank's bytes only (the values are not what the
// test checks; the bytes are the same as with a peer).
struct CountedSharded {
  int64_t weights = 0, buckets_and_masters = 0, optimizer = 0, grads = 0, copies = 0, activations = 0, peak = 0;
};

// sharded_master false: ZeRO-1 alone (fp32 weights, half the moments, the gradients in the buckets).
CountedSharded count_sharded_step(const model::ModelConfig& cfg, int64_t seq, int64_t micro_batch, bool sharded_master) {
  constexpr int kWorld = 2;
  CountedSharded c;
  torch::manual_seed(0);
  testing::CountingCpuAllocator counter;
  model::Transformer model(cfg, 1);
  const int64_t fp32_weights = counter.live();
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::vector<torch::Tensor> plist;
  std::vector<bool> bf16;
  for (auto& p : model->named_parameters()) {
    params.emplace_back(p.key(), p.value());
    plist.push_back(p.value());
    bf16.push_back(sharded_master && p.value().dim() == 2 && p.key().find("embed_tokens") == std::string::npos);
  }
  int64_t before = counter.live();
  OptimizerShards shards(plist, 0, kWorld, 25 << 20, bf16);
  c.buckets_and_masters = counter.live() - before;
  before = counter.live();
  AdamW opt(params, TrainConfig{}, &shards.parts());
  c.optimizer = counter.live() - before;
  before = counter.live();
  if (sharded_master) shards.use_bf16_working_weights();
  c.weights = fp32_weights + (counter.live() - before);
  auto reduce_scatter = [](torch::Tensor out, torch::Tensor in) {
    out.copy_(in.narrow(0, 0, out.numel()));
    return std::function<void()>([] {});
  };
  auto all_gather = [](torch::Tensor out, torch::Tensor in) {
    out.narrow(0, 0, in.numel()).copy_(in);
    return std::function<void()>([] {});
  };
  GradSync sync(plist, kWorld, shards.plan(), shards.flats(), shards.shards(), reduce_scatter);
  const torch::Device cpu(torch::kCPU);
  // Two micro-batches (2, then 4 rows) of one step, as Trainer::accumulate_gradients runs them.
  std::map<int64_t, int64_t> forward;
  opt.zero_grad();
  sync.begin_step();
  const int64_t before_grads = counter.live();
  {
    AutocastGuard ac(cpu, true);
    for (int64_t b : {2, 4}) {
      auto window = torch::randint(cfg.vocab_size, {b, seq + 1}, torch::kInt64);
      const int64_t at = counter.live();
      auto loss = model->loss(window);
      forward[b] = counter.live() - at;
      sync.before_backward(b == 4);
      loss.backward();
    }
  }
  sync.finish();
  c.grads = counter.live() - before_grads;
  c.activations = forward[4] - forward[2];
  c.copies = forward[2] - c.activations;
  opt.step(1e-3);
  shards.gather_params(all_gather);
  // A whole step at the plan's micro-batch from the state between steps.
  opt.zero_grad();
  sync.begin_step();
  counter.reset_peak();
  {
    auto window = torch::randint(cfg.vocab_size, {micro_batch, seq + 1}, torch::kInt64);
    AutocastGuard ac(cpu, true);
    sync.before_backward(true);
    model->loss(window).backward();
  }
  sync.finish();
  opt.step(1e-3);
  shards.gather_params(all_gather);
  c.peak = counter.peak();
  return c;
}

// ZeRO-1 and the distributed optimizer on 2 GPUs. Both: no .grad kept after backward (the fp32
// buckets hold the gradients), this rank's gradient shard, half the moments. The distributed
// optimizer: bf16 working weights (2 bytes a matmul weight), half the fp32 masters, and autocast
// copies only what stays fp32 and feeds a matmul (the tied head).
TEST(PlanMemory, ZeroOneAndDistributedOptimizerTermsAreWithinTenPercentOfACountedCpuStep) {
  constexpr int64_t kSeq = 128;
  for (const bool sharded_master : {false, true})
  for (const model::ModelConfig& cfg : counted_models()) {
    SCOPED_TRACE(cfg.attention + " attention, d " + std::to_string(cfg.d_model) + (sharded_master ? ", sharded master" : ", ZeRO-1"));
    PlanRequest req;
    req.model = cfg;
    req.seq_len = kSeq;
    req.micro_batch = 2;
    req.n_gpus = 2;
    req.zero = true;
    req.sharded_master = sharded_master;
    auto plan = make_plan(req);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const MemoryEstimate& m = plan->memory;
    const CountedSharded c = count_sharded_step(cfg, kSeq, req.micro_batch, sharded_master);
    std::printf("plan vs a counted CPU step of %s (rank 0 of 2, %s attention, %lld params):\n",
                sharded_master ? "the distributed optimizer" : "ZeRO-1", cfg.attention.c_str(),
                static_cast<long long>(plan->params));
    expect_within(c.weights, m.weights, "weights");
    expect_within(c.buckets_and_masters, m.grad_buckets + m.master_weights, "buckets+masters");
    expect_within(c.optimizer, m.optimizer, "optimizer");
    expect_within(c.copies, m.weight_copies, "bf16 copies");
    expect_within(c.activations, m.activations, "activations");
    EXPECT_EQ(m.grads, 0);
    std::printf("  %-14s counted %8.2f MB, planned %8.2f MB\n", "grads kept", c.grads / 1e6, m.grads / 1e6);
    EXPECT_LT(c.grads, 0.01 * m.weights) << "no gradient may outlive its backward: the buckets hold the sum";
    expect_total_covers_peak(Counted{0, 0, 0, 0, 0, c.peak}, m);
  }
}

}  // namespace
}  // namespace lm::train
