// The batched model scorer: uniform logits give ln(V), batching and padding change nothing,
// long requests are cut from the left, and the twin is the run's own initial weights.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "eval/model_scorer.h"
#include "eval/nll.h"
#include "model/config.h"

namespace lm::eval {
namespace {

model::Transformer tiny(uint64_t seed, bool tied = true) {
  auto cfg = *model::preset("tiny");
  cfg.tie_embeddings = tied;
  model::Transformer m(cfg);
  m->init_weights(seed);
  m->eval();
  return m;
}

TokenIds random_ids(int n, int vocab, uint64_t seed) {
  auto t = torch::randint(vocab, {n}, at::detail::createCPUGenerator(seed), torch::kInt64);
  TokenIds out(n);
  for (int i = 0; i < n; ++i) out[i] = static_cast<int32_t>(t[i].item<int64_t>());
  return out;
}

// Zero embeddings: the residual stream is 0 everywhere, RMSNorm(0) = 0, logits = 0, so each
// next-token distribution is uniform and NLL = ln(V). Tolerance 1e-6: log_softmax in fp32 on
// V = 512 equal logits is exact up to one rounding of ln(512) ~ 6.24 (fp32 ulp 4.8e-7).
TEST(ModelScorer, UniformLogitsGiveLnVocab) {
  for (bool tied : {true, false}) {
    auto m = tiny(1, tied);
    {
      torch::NoGradGuard ng;
      m->model->embed_tokens->weight.zero_();
      if (m->lm_head) m->lm_head->weight.zero_();
    }
    const auto windows = make_windows(random_ids(300, 512, 3), 64, 0);
    ScorerOptions so;
    so.batch_size = 3;
    auto st = score_windows(windows, make_model_scorer(m, so));
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->tokens, 299);
    EXPECT_NEAR(st->nats_per_token(), std::log(512.0), 1e-6) << (tied ? "tied" : "untied");
    EXPECT_NEAR(st->perplexity(), 512.0, 512.0 * 1e-6);
  }
}

// Direct reference: one sequence, full log_softmax, no batching, no position selection.
std::vector<double> reference_logprobs(model::Transformer& m, const TokenRequest& r) {
  torch::NoGradGuard ng;
  std::vector<int64_t> full(r.context.begin(), r.context.end());
  full.insert(full.end(), r.continuation.begin(), r.continuation.end());
  auto t = torch::tensor(full, torch::kInt64).unsqueeze(0);
  auto logp = torch::log_softmax(m->forward(t.narrow(1, 0, t.size(1) - 1)), -1)[0];
  std::vector<double> out;
  const int64_t n = static_cast<int64_t>(full.size());
  for (size_t j = 0; j < r.continuation.size(); ++j) {
    const int64_t pos = n - static_cast<int64_t>(r.continuation.size()) + static_cast<int64_t>(j) - 1;
    out.push_back(logp[pos][full[pos + 1]].item<double>());
  }
  return out;
}

// Requests of different lengths in one padded batch score as they do alone. Tolerance 2e-5:
// fp32 matmuls over different batch shapes may sum in another order (~1e-6 relative on
// log-probs of magnitude ~6).
TEST(ModelScorer, BatchedPaddedEqualsOneByOne) {
  auto m = tiny(7);
  std::vector<TokenRequest> reqs;
  for (int i = 0; i < 7; ++i) {
    TokenRequest r;
    r.context = random_ids(3 + 9 * i, 512, 10 + i);
    r.continuation = random_ids(1 + (i % 4), 512, 100 + i);
    reqs.push_back(r);
  }
  ScorerOptions so;
  so.batch_size = 4;
  auto got = score_requests(m, reqs, so);
  ASSERT_EQ(got.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto want = reference_logprobs(m, reqs[i]);
    ASSERT_EQ(got[i].size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(got[i][j], want[j], 2e-5) << i << "," << j;
  }
}

// CPU bf16 (training's autocast, --dtype bf16 / auto) runs, and stays within 0.1% of fp32.
// (fp32 through the CPU cross-entropy kernel against log_softmax: BatchedPaddedEqualsOneByOne.)
TEST(ModelScorer, Bf16AutocastNearFp32) {
  auto m = tiny(9, /*tied=*/false);
  const auto windows = make_windows(random_ids(2000, 512, 4), 128, 0);
  ScorerOptions so;
  auto fp32 = score_windows(windows, make_model_scorer(m, so));
  so.bf16 = true;
  auto bf16 = score_windows(windows, make_model_scorer(m, so));
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  EXPECT_NE(fp32->sum_nats, bf16->sum_nats);  // bf16 did run
  EXPECT_NEAR(bf16->sum_nats / fp32->sum_nats, 1.0, 1e-3);
}

// Longer than max_seq_len + 1: the harness keeps the last L+1 tokens.
TEST(ModelScorer, LongRequestsAreCutFromTheLeft) {
  auto m = tiny(5);
  TokenRequest longr;
  longr.context = random_ids(200, 512, 1);
  longr.continuation = random_ids(5, 512, 2);
  TokenRequest cut;
  cut.context.assign(longr.context.end() - (129 - 5), longr.context.end());
  cut.continuation = longr.continuation;
  auto a = score_requests(m, {longr}, {});
  auto b = score_requests(m, {cut}, {});
  ASSERT_EQ(a[0].size(), 5u);
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(a[0][j], b[0][j], 1e-6);
}

// The twin is exactly Transformer(cfg) + init_weights(seed), as `lmtrain fit` starts.
TEST(Twin, IsTheRunsInitialWeights) {
  auto cfg = *model::preset("tiny");
  auto twin = make_twin(cfg, 1234);
  model::Transformer start(cfg);
  start->init_weights(1234);
  auto other = make_twin(cfg, 1235);
  auto tp = twin->named_parameters();
  auto sp = start->named_parameters();
  auto op = other->named_parameters();
  bool any_diff = false;
  for (const auto& p : tp) {
    EXPECT_TRUE(torch::equal(p.value(), sp[p.key()])) << p.key();
    if (p.value().dim() > 1) any_diff = any_diff || !torch::equal(p.value(), op[p.key()]);
  }
  EXPECT_TRUE(any_diff);  // the seed matters
  EXPECT_FALSE(twin->is_training());
}

}  // namespace
}  // namespace lm::eval
