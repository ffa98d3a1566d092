// Scoring without a model: _encode_pair, acc / acc_norm / acc_bytes on hand-made examples with
// known log-probs, standard errors, McNemar, NLL windows.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "eval/nll.h"
#include "eval/score.h"

namespace lm::eval {
namespace {

// One token per byte: boundaries are exact, so the harness's rules are visible directly.
TokenIds bytes_of(std::string_view s) { return TokenIds(s.begin(), s.end()); }
std::string text_of(const TokenIds& t) { return std::string(t.begin(), t.end()); }

TEST(EncodePair, TrailingSpaceMovesIntoContinuation) {
  bool ok = false;
  TokenRequest r = encode_pair(bytes_of, "Answer: ", "yes", {7}, &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(r.context, (TokenIds{7, 'A', 'n', 's', 'w', 'e', 'r', ':'}));
  EXPECT_EQ(text_of(r.continuation), " yes");
  // Empty context: the prefix alone, the continuation encoded on its own.
  r = encode_pair(bytes_of, "", "abc", {7}, &ok);
  EXPECT_EQ(r.context, TokenIds{7});
  EXPECT_EQ(text_of(r.continuation), "abc");
}

// A tokenizer that merges across the boundary ("ab" is one token) shows the harness's slice:
// encode(context) is kept and the continuation is whole[len(encode(context)):].
TEST(EncodePair, BoundaryMergeFollowsTheHarnessSlice) {
  Encoder merging = [](std::string_view s) {
    TokenIds out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 'a' && i + 1 < s.size() && s[i + 1] == 'b') {
        out.push_back(1000);  // "ab"
        ++i;
      } else {
        out.push_back(static_cast<unsigned char>(s[i]));
      }
    }
    return out;
  };
  bool ok = true;
  TokenRequest r = encode_pair(merging, "xa", "bc", {}, &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(r.context, (TokenIds{'x', 'a'}));  // encode("xa")
  EXPECT_EQ(r.continuation, (TokenIds{'c'}));   // encode("xabc") = [x, ab, c] from index 2
}

// Known per-token log-probs for each continuation text.
Scorer table_scorer(std::map<std::string, std::vector<double>> table) {
  return [table](const std::vector<TokenRequest>& reqs) -> absl::StatusOr<std::vector<std::vector<double>>> {
    std::vector<std::vector<double>> out;
    for (const auto& r : reqs) {
      auto it = table.find(text_of(r.continuation));
      if (it == table.end()) return absl::NotFoundError("no log-probs for '" + text_of(r.continuation) + "'");
      if (it->second.size() != r.continuation.size()) return absl::InternalError("length mismatch");
      out.push_back(it->second);
    }
    return out;
  };
}

std::vector<double> spread(double total, size_t n) { return std::vector<double>(n, total / n); }

// Example 1, three choices, gold 1:
//   " a"      (norm "a", 1 char, 1 byte)        ll -1.5 : per char -1.5
//   " bbbbbb" (6 chars, 6 bytes)                 ll -3.0 : per char -0.5
//   " cc"     (2 chars)                          ll -2.5 : per char -1.25
//   acc picks "a" (wrong), acc_norm picks "bbbbbb" (right), acc_bytes the same (right).
// Example 2, two choices, gold 0 — Bengali makes chars and bytes disagree:
//   " কক" (2 chars, 6 bytes) ll -2.0 : per char -1.0, per byte -0.333
//   " xyz" (3 chars, 3 bytes) ll -2.4 : per char -0.8, per byte -0.8
//   acc right (kk), acc_norm wrong (xyz), acc_bytes right (kk).
TEST(McScoring, HandMadeExampleGivesExpectedAccAndAccNorm) {
  McTask task;
  task.name = "hand";
  task.examples.push_back(question_answer_example("q1", {"a", "bbbbbb", "cc"}, 1));
  task.examples.push_back(question_answer_example("q2", {"কক", "xyz"}, 0));
  const std::string kk = " কক";
  Scorer scorer = table_scorer({{" a", spread(-1.5, 2)},
                                {" bbbbbb", spread(-3.0, 7)},
                                {" cc", spread(-2.5, 3)},
                                {kk, spread(-2.0, kk.size())},
                                {" xyz", spread(-2.4, 4)}});
  auto scored = score_task(task, bytes_of, scorer, {});
  ASSERT_TRUE(scored.ok()) << scored.status();
  const auto& ex = scored->examples;
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_NEAR(ex[0].choices[1].logprob, -3.0, 1e-12);  // summed, not averaged
  EXPECT_EQ(ex[0].choices[1].chars, 6);
  EXPECT_EQ(ex[1].choices[0].chars, 2);
  EXPECT_EQ(ex[1].choices[0].bytes, 6);
  EXPECT_EQ(ex[0].pred, 0);
  EXPECT_EQ(ex[0].pred_norm, 1);
  EXPECT_EQ(ex[0].pred_bytes, 1);
  EXPECT_EQ(ex[1].pred, 0);
  EXPECT_EQ(ex[1].pred_norm, 1);
  EXPECT_EQ(ex[1].pred_bytes, 0);
  TaskMetrics m = task_metrics(ex, task.chance());
  EXPECT_EQ(m.n, 2);
  EXPECT_DOUBLE_EQ(m.acc.mean, 0.5);
  EXPECT_DOUBLE_EQ(m.acc_norm.mean, 0.5);
  EXPECT_DOUBLE_EQ(m.acc_bytes.mean, 1.0);
  EXPECT_NEAR(m.acc.stderr_, 0.5, 1e-12);  // sd(n-1) of {0,1} = 0.7071, / sqrt(2)
  EXPECT_DOUBLE_EQ(m.acc_bytes.stderr_, 0.0);
  EXPECT_NEAR(m.chance, (1.0 / 3 + 1.0 / 2) / 2, 1e-12);
}

// The model's context (window): a request longer than window + 1 tokens is counted (its context
// is cut from the left by the scorer, as the harness), a continuation longer than the window is
// refused under strict, as the harness asserts len(continuation_enc) <= max_length.
TEST(McScoring, TruncationCountedAndLongContinuationRefusedWhenStrict) {
  McTask task;
  task.name = "hand";
  // bytes_of: one token per byte. Context "Question: q1\nAnswer:" = 20 tokens; " a" 2, " bbbbbb" 7.
  task.examples.push_back(question_answer_example("q1", {"a", "bbbbbb"}, 1));
  Scorer scorer = [](const std::vector<TokenRequest>& reqs) -> absl::StatusOr<std::vector<std::vector<double>>> {
    std::vector<std::vector<double>> out;
    for (const auto& r : reqs) out.emplace_back(r.continuation.size(), -1.0);
    return out;
  };
  auto wide = score_task(task, bytes_of, scorer, {}, 64);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->truncated, 0);  // 22 and 27 tokens fit 64 + 1
  auto narrow = score_task(task, bytes_of, scorer, {}, 21);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_EQ(narrow->truncated, 1);  // 27 > 22; 22 = 21 + 1 still fits
  auto refused = score_task(task, bytes_of, scorer, {}, 6, /*strict=*/true);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("continuation is 7 tokens, longer than the model's context of 6"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("--strict"), std::string::npos) << refused.status();
}

// Issue 30 item 2: without strict, an example whose continuation cannot fit the context is left
// out and listed (the others are scored), instead of ending the whole evaluation.
TEST(McScoring, LongContinuationSkippedAndCountedByDefault) {
  McTask task;
  task.name = "hand";
  for (const auto& [id, choices, gold] : {std::tuple<std::string, std::vector<std::string>, int>{"q0", {"a", "b"}, 0},
                                          {"q1", {"a", "bbbbbb"}, 1},  // " bbbbbb": 7 tokens
                                          {"q2", {"aa", "b"}, 1}}) {
    task.examples.push_back(question_answer_example(id, choices, gold));
    task.examples.back().id = id;
  }
  // Choice 1 is always the better one: q2 right, q0 wrong.
  Scorer scorer = [](const std::vector<TokenRequest>& reqs) -> absl::StatusOr<std::vector<std::vector<double>>> {
    std::vector<std::vector<double>> out;
    for (const auto& r : reqs) out.emplace_back(r.continuation.size(), text_of(r.continuation) == " b" ? -0.1 : -2.0);
    return out;
  };
  auto s = score_task(task, bytes_of, scorer, {}, 6);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->skipped.size(), 1u);
  EXPECT_EQ(s->skipped[0].id, "q1");
  EXPECT_EQ(s->skipped[0].choice, 1);
  EXPECT_EQ(s->skipped[0].continuation, 7);
  EXPECT_EQ(s->kept, (std::vector<size_t>{0, 2}));
  ASSERT_EQ(s->examples.size(), 2u);
  EXPECT_EQ(s->examples[0].id, "q0");
  EXPECT_EQ(s->examples[1].id, "q2");
  EXPECT_EQ(s->requests.size(), 4u);  // the skipped example's choices are not scored
  EXPECT_EQ(s->examples[0].pred, 1);
  EXPECT_EQ(s->examples[1].pred, 1);
  EXPECT_EQ(task_metrics(s->examples, 0.5).n, 2);
  auto wide = score_task(task, bytes_of, scorer, {}, 64);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_TRUE(wide->skipped.empty());
  EXPECT_EQ(wide->examples.size(), 3u);
}

TEST(McScoring, TiesGoToTheFirstChoiceAsNumpyArgmax) {
  ExampleResult r;
  r.choices = {{-1.0, 1, 2, 2}, {-1.0, 1, 2, 2}};
  decide(r);
  EXPECT_EQ(r.pred, 0);
  EXPECT_EQ(r.pred_norm, 0);
}

TEST(Stats, MeanStderrMatchesHandComputation) {
  // {1,1,1,0}: mean 0.75, sample var = (3*0.0625 + 0.5625)/3 = 0.25, stderr = 0.5/2 = 0.25
  Metric m = mean_stderr({1, 1, 1, 0});
  EXPECT_DOUBLE_EQ(m.mean, 0.75);
  EXPECT_NEAR(m.stderr_, 0.25, 1e-12);
}

TEST(Stats, ExactMcNemar) {
  // 8 discordant pairs for a, 2 for b, plus 5 ties: p = 2 * (C(10,0)+C(10,1)+C(10,2)) / 2^10.
  std::vector<bool> a, b;
  for (int i = 0; i < 8; ++i) { a.push_back(true); b.push_back(false); }
  for (int i = 0; i < 2; ++i) { a.push_back(false); b.push_back(true); }
  for (int i = 0; i < 5; ++i) { a.push_back(true); b.push_back(true); }
  PairedTest p = mcnemar(a, b);
  EXPECT_EQ(p.only_a, 8);
  EXPECT_EQ(p.only_b, 2);
  EXPECT_NEAR(p.p_value, 2.0 * 56.0 / 1024.0, 1e-12);
  EXPECT_NEAR(p.diff, 6.0 / 15.0, 1e-12);
  // No discordant pairs: p = 1. A balanced split: p = 1 (capped).
  EXPECT_DOUBLE_EQ(mcnemar({true, false}, {true, false}).p_value, 1.0);
  EXPECT_DOUBLE_EQ(mcnemar({true, false}, {false, true}).p_value, 1.0);
  // Large m stays finite (log-space binomial): 300 vs 200 discordant.
  std::vector<bool> x(500, false), y(500, false);
  for (int i = 0; i < 300; ++i) x[i] = true;
  for (int i = 300; i < 500; ++i) y[i] = true;
  const double pv = mcnemar(x, y).p_value;
  EXPECT_GT(pv, 0.0);
  EXPECT_LT(pv, 1e-5);  // z = 100/sqrt(500) = 4.47 -> two-sided ~8e-6
}

TokenIds iota_stream(int n) {
  TokenIds s(n);
  for (int i = 0; i < n; ++i) s[i] = i;
  return s;
}

TEST(Windows, NonOverlappingScoresEveryTargetOnce) {
  auto w = make_windows(iota_stream(10), 4, 0);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].tokens, (TokenIds{0, 1, 2, 3, 4}));
  EXPECT_EQ(w[0].first_target, 1);
  EXPECT_EQ(w[1].tokens, (TokenIds{4, 5, 6, 7, 8}));
  EXPECT_EQ(w[1].first_target, 1);
  EXPECT_EQ(w[2].tokens, (TokenIds{8, 9}));
  TokenIds targets;
  for (const auto& x : w) targets.insert(targets.end(), x.tokens.begin() + x.first_target, x.tokens.end());
  EXPECT_EQ(targets, (TokenIds{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Windows, SlidingScoresOnlyNewTargetsWithLongContext) {
  auto w = make_windows(iota_stream(10), 4, 2);
  TokenIds targets;
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_LE(w[i].tokens.size(), 5u);
    if (i > 0) { EXPECT_GE(w[i].first_target, 2); }  // >= seq_len - stride tokens of context
    targets.insert(targets.end(), w[i].tokens.begin() + w[i].first_target, w[i].tokens.end());
  }
  EXPECT_EQ(targets, (TokenIds{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(w[1].tokens, (TokenIds{2, 3, 4, 5, 6}));
  EXPECT_EQ(w[1].first_target, 3);
  // max_targets stops early.
  auto few = make_windows(iota_stream(100), 4, 0, 6);
  int64_t n = 0;
  for (const auto& x : few) n += static_cast<int64_t>(x.tokens.size()) - x.first_target;
  EXPECT_EQ(n, 6);
}

// lm-evaluation-harness's get_rolling_token_windows(doc, prefix, max_seq_len 4, context_len 1) +
// make_disjoint_window, worked by hand for 10 tokens: preds [0:4] after the prefix, [4:8] with
// inputs doc[3:7], [8:10] with inputs doc[5:9] (the last window keeps 4 tokens of context).
TEST(Windows, HarnessRollingPerDocumentNoEos) {
  auto w = harness_rolling_windows(iota_stream(10), 99, 4);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].tokens, (TokenIds{99, 0, 1, 2, 3}));
  EXPECT_EQ(w[0].first_target, 1);
  EXPECT_EQ(w[1].tokens, (TokenIds{3, 4, 5, 6, 7}));
  EXPECT_EQ(w[1].first_target, 1);
  EXPECT_EQ(w[2].tokens, (TokenIds{5, 6, 7, 8, 9}));
  EXPECT_EQ(w[2].first_target, 3);
  // Documents are the runs between EOS (2 here); EOS itself is never a target.
  auto docs = split_documents(TokenIds{5, 6, 2, 7, 2, 2, 8}, 2);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[1], (TokenIds{7}));
  EXPECT_EQ(docs[2], (TokenIds{8}));
  auto one = harness_rolling_windows(TokenIds{7}, 1, 4);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].tokens, (TokenIds{1, 7}));
}

TEST(Nll, StatsFromKnownLogProbs) {
  // Every target gets log p = -ln 4: 2 bits per token.
  auto windows = make_windows(iota_stream(9), 4, 0);
  Scorer s = [](const std::vector<TokenRequest>& reqs) -> absl::StatusOr<std::vector<std::vector<double>>> {
    std::vector<std::vector<double>> out;
    for (const auto& r : reqs) out.emplace_back(r.continuation.size(), -std::log(4.0));
    return out;
  };
  auto st = score_windows(windows, s);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->tokens, 8);
  EXPECT_NEAR(st->nats_per_token(), std::log(4.0), 1e-12);
  EXPECT_NEAR(st->perplexity(), 4.0, 1e-12);
  // Each token decodes to 2 bytes, 1 char: 1 bit per byte, 2 bits per char.
  count_text(*st, windows, [](const TokenIds& t) {
    std::string out;
    for (size_t i = 0; i < t.size(); ++i) out += "\u00e9";
    return out;
  });
  EXPECT_EQ(st->bytes, 16);
  EXPECT_EQ(st->chars, 8);
  EXPECT_NEAR(st->bits_per_byte(), 1.0, 1e-12);
  EXPECT_NEAR(st->bits_per_char(), 2.0, 1e-12);
}

}  // namespace
}  // namespace lm::eval
