// GradSync in one process with a recording fake all-reduce: when buckets start (inside backward,
// in bucket order, not on no_sync micro-batches), what they carry (the full, accumulated gradient,
// the tied embedding's included) and what finish() writes back.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/transformer.h"
#include "train/grad_sync.h"

namespace {
using lm::train::GradSync;

struct Launch {
  const void* data;
  torch::Tensor snapshot;  // the bucket's contents when its all-reduce was started
};

// A world of `world` identical ranks: the sum is the tensor times `world`, done at wait().
struct FakeComm {
  std::vector<Launch> launches;
  int world = 1;
  lm::train::StartSum start_sum() {
    return [this](torch::Tensor flat) {
      launches.push_back({flat.data_ptr(), flat.clone()});
      return std::function<void()>([flat, w = world]() mutable { flat.mul_(static_cast<double>(w)); });
    };
  }
};

struct Fixture {
  lm::model::Transformer model{nullptr};
  std::vector<torch::Tensor> params;
  explicit Fixture() {
    auto cfg = *lm::model::preset("tiny");
    EXPECT_TRUE(cfg.tie_embeddings);
    model = lm::model::Transformer(cfg);
    model->init_weights(7);
    for (auto& p : model->parameters()) params.push_back(p);
  }
  torch::Tensor window(int seed) {
    torch::manual_seed(seed);
    return torch::randint(0, 512, {2, 17}, torch::kInt64);
  }
  void backward(int seed) { model->loss(window(seed)).backward(); }
  void zero_grad() {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
  }
};

constexpr int64_t kSmallBuckets = 50 << 10;  // 50 KiB: tiny's ~0.9 MB of gradients in several buckets

// Each bucket's snapshot must equal the final .grad of its parameters, laid out in bucket order.
void expect_snapshots_equal_grads(const GradSync& gs, const FakeComm& fc, const std::vector<torch::Tensor>& params) {
  auto layout = gs.bucket_layout();
  ASSERT_EQ(fc.launches.size(), layout.size());
  for (size_t b = 0; b < layout.size(); ++b) {
    std::vector<torch::Tensor> parts;
    for (size_t i : layout[b]) parts.push_back(params[i].grad().reshape({-1}));
    EXPECT_TRUE(torch::equal(fc.launches[b].snapshot, torch::cat(parts))) << "bucket " << b;
  }
}

TEST(GradSync, BucketsAreReverseParameterOrderUnderTheCap) {
  Fixture f;
  FakeComm fc;
  GradSync gs(f.params, 1, fc.start_sum(), true, kSmallBuckets);
  auto layout = gs.bucket_layout();
  ASSERT_GT(layout.size(), 3u);
  size_t expect = f.params.size();
  for (const auto& b : layout) {
    int64_t bytes = 0;
    for (size_t i : b) {
      EXPECT_EQ(i, --expect);  // strictly descending across buckets: the last parameter comes first
      bytes += f.params[i].numel() * 4;
    }
    if (b.size() > 1) { EXPECT_LE(bytes, kSmallBuckets); }  // only a lone big parameter may exceed the cap
  }
  EXPECT_EQ(expect, 0u);
  // The tied embedding (registered first) sits in the last bucket: its gradient is final last.
  EXPECT_EQ(layout.back().back(), 0u);
}

TEST(GradSync, OverlapStartsEveryBucketInsideBackwardWithTheFullGradient) {
  Fixture f;
  FakeComm fc;
  GradSync gs(f.params, 1, fc.start_sum(), true, kSmallBuckets);
  gs.before_backward(true);
  f.backward(1);
  // Before finish(): every bucket has started, in bucket order, from the hooks.
  const auto layout = gs.bucket_layout();
  ASSERT_EQ(fc.launches.size(), layout.size());
  EXPECT_EQ(gs.stats().launched_in_backward, static_cast<int64_t>(layout.size()));
  // Each carries the final gradient: in particular the tied embedding's, which sums the lookup's and
  // the LM head's contributions (a hook firing after only one of them would differ here).
  expect_snapshots_equal_grads(gs, fc, f.params);
  auto before = f.params[0].grad().clone();
  gs.finish();
  EXPECT_TRUE(torch::equal(f.params[0].grad(), before));  // world 1: sum/1 is the identity
  // A second step reuses the same hooks and buffers.
  f.zero_grad();
  fc.launches.clear();
  gs.before_backward(true);
  f.backward(2);
  EXPECT_EQ(fc.launches.size(), layout.size());
  expect_snapshots_equal_grads(gs, fc, f.params);
  gs.finish();
}

TEST(GradSync, NoSyncMicroBatchesAccumulateLocallyAndTheLastCarriesTheSum) {
  Fixture f;
  FakeComm fc;
  fc.world = 2;
  GradSync gs(f.params, 2, fc.start_sum(), true, kSmallBuckets);
  gs.before_backward(false);
  f.backward(1);
  EXPECT_TRUE(fc.launches.empty()) << "a no_sync micro-batch must not communicate";
  gs.before_backward(true);
  f.backward(2);
  EXPECT_EQ(fc.launches.size(), gs.bucket_layout().size());
  expect_snapshots_equal_grads(gs, fc, f.params);  // .grad holds micro 1 + micro 2 here
  std::vector<torch::Tensor> local;
  for (auto& p : f.params) local.push_back(p.grad().clone());
  gs.finish();
  // Two identical ranks: (g + g) * 0.5 == g exactly (doubling and halving are exact in binary).
  for (size_t i = 0; i < local.size(); ++i) EXPECT_TRUE(torch::equal(f.params[i].grad(), local[i])) << i;
}

TEST(GradSync, PostBackwardStartsNothingUntilFinish) {
  Fixture f;
  FakeComm fc;
  GradSync gs(f.params, 1, fc.start_sum(), false, kSmallBuckets);
  gs.before_backward(true);
  f.backward(1);
  EXPECT_TRUE(fc.launches.empty());
  gs.finish();
  EXPECT_GT(fc.launches.size(), 0u);
  EXPECT_EQ(gs.stats().launched_in_backward, 0);
}

TEST(GradSync, BackwardOutsideAStepIsLeftAlone) {
  // The start-up gradient check and a destroyed GradSync must not communicate.
  Fixture f;
  FakeComm fc;
  {
    GradSync gs(f.params, 1, fc.start_sum(), true, kSmallBuckets);
    f.backward(1);  // not armed
    EXPECT_TRUE(fc.launches.empty());
  }
  f.zero_grad();
  f.backward(2);  // hooks removed
  EXPECT_TRUE(fc.launches.empty());
}

}  // namespace

// distributed.reduce_dtype bf16: every bucket goes out as bf16 (half the bytes), the same length,
// and finish() leaves the bf16 sum widened and averaged: with two identical ranks, each gradient
// rounded to bf16 (2g and g/2 are exact). Seen red with the collective left on the fp32 bucket.
TEST(GradSync, Bf16ReductionCarriesHalfTheBytesAndRoundsTheGradientOnce) {
  Fixture f;
  FakeComm fc;
  fc.world = 2;
  GradSync gs(f.params, 2, fc.start_sum(), true, kSmallBuckets);
  gs.set_reduce_dtype(torch::kBFloat16);
  gs.before_backward(true);
  f.backward(3);
  const auto layout = gs.bucket_layout();
  ASSERT_EQ(fc.launches.size(), layout.size());
  for (size_t b = 0; b < layout.size(); ++b) {
    EXPECT_EQ(fc.launches[b].snapshot.scalar_type(), torch::kBFloat16) << "bucket " << b;
    int64_t n = 0;
    for (size_t i : layout[b]) n += f.params[i].numel();
    EXPECT_EQ(fc.launches[b].snapshot.numel(), n) << "bucket " << b;
  }
  std::vector<torch::Tensor> local;
  for (auto& p : f.params) local.push_back(p.grad().clone());
  gs.finish();
  int64_t rounded = 0;
  for (size_t i = 0; i < local.size(); ++i) {
    auto want = local[i].to(torch::kBFloat16).to(torch::kFloat32);
    EXPECT_TRUE(torch::equal(f.params[i].grad(), want)) << i;
    rounded += (want != local[i]).sum().item<int64_t>();
  }
  EXPECT_GT(rounded, 0) << "no gradient changed in bf16: the test would not see the reduction's dtype";
  EXPECT_THROW(GradSync(f.params, 2, fc.start_sum(), false, kSmallBuckets).set_reduce_dtype(torch::kBFloat16),
               c10::Error);
}

