// Multiple-choice scoring without a model: request encoding as the harness's _encode_pair, the
// scorer interface, acc / acc_norm / acc_bytes with standard errors, and the paired test.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "eval/tasks.h"

namespace lm::eval {

using TokenIds = std::vector<int32_t>;

// Tokens before the scored part and the scored tokens; log p(continuation[i] | context,
// continuation[:i]) is what a Scorer returns.
struct TokenRequest {
  TokenIds context;
  TokenIds continuation;
};
using Encoder = std::function<TokenIds(std::string_view)>;
// One vector of per-token log-probs (natural log) per request, continuation length each.
using Scorer = std::function<absl::StatusOr<std::vector<std::vector<double>>>(const std::vector<TokenRequest>&)>;

// The harness's _encode_pair: trailing spaces of the context move to the continuation, and
// the continuation is encode(context + continuation)[len(encode(context)):]. `prefix` (e.g. BOS)
// is put in front of the context ids; an empty context with an empty prefix gets no tokens.
// `boundary_ok` (optional) says whether encode(context) was a prefix of the whole encoding.
TokenRequest encode_pair(const Encoder& encode, std::string context, std::string continuation,
                         const TokenIds& prefix, bool* boundary_ok = nullptr);

struct ChoiceResult {
  double logprob = 0;  // sum over the continuation tokens (nats)
  int64_t tokens = 0;
  int64_t chars = 0;   // code points of norm_text (the harness's len())
  int64_t bytes = 0;   // UTF-8 bytes of norm_text
};

struct ExampleResult {
  std::string id;
  int gold = 0;
  std::vector<ChoiceResult> choices;
  int pred = 0;        // argmax logprob (first on ties, as numpy)
  int pred_norm = 0;   // argmax logprob / chars
  int pred_bytes = 0;  // argmax logprob / bytes
  bool correct() const { return pred == gold; }
  bool correct_norm() const { return pred_norm == gold; }
  bool correct_bytes() const { return pred_bytes == gold; }
};

// An example that cannot be scored: one of its continuations is longer than the model's context.
struct SkippedExample {
  std::string id;
  int choice = 0;              // the first choice that is too long
  int64_t continuation = 0;    // its length in tokens
};

// Scores every choice of every example that fits (one Scorer call for the whole task).
struct TaskScoring {
  std::vector<ExampleResult> examples;  // the scored examples, in task order
  std::vector<size_t> kept;             // parallel to examples: the index into task.examples
  std::vector<SkippedExample> skipped;  // examples too long for the model's context, not scored
  std::vector<TokenRequest> requests;   // parallel to the flattened choices of `examples`, for --log-samples
  int64_t boundary_mismatches = 0;      // requests whose context encoding was not a prefix
  int64_t truncated = 0;  // requests longer than window + 1 tokens: the context is cut from the left
};
// `window` > 0 is the model's context (max_seq_len): a request of more than window + 1 tokens
// is counted in `truncated` (the scorer keeps its last window + 1, as the harness, which warns).
// An example with a continuation of more than `window` tokens cannot be scored (the harness
// asserts len(continuation_enc) <= max_length): it is left out and listed in `skipped`, or, with
// `strict`, refused with InvalidArgument naming the task, example and lengths.
absl::StatusOr<TaskScoring> score_task(const McTask& task, const Encoder& encode, const Scorer& scorer,
                                       const TokenIds& prefix, int64_t window = 0, bool strict = false);

// Fills pred / pred_norm / pred_bytes from the choices.
void decide(ExampleResult& ex);

struct Metric {
  double mean = 0;
  double stderr_ = 0;  // sample standard deviation (n-1) / sqrt(n), as the harness's mean_stderr
};
Metric mean_stderr(const std::vector<double>& xs);

struct TaskMetrics {
  int64_t n = 0;
  double chance = 0;
  Metric acc, acc_norm, acc_bytes;
};
TaskMetrics task_metrics(const std::vector<ExampleResult>& results, double chance);

// Paired comparison of two systems on the same examples (correct / wrong each).
struct PairedTest {
  int64_t n = 0;
  int64_t only_a = 0;  // a right, b wrong
  int64_t only_b = 0;  // b right, a wrong
  double diff = 0;     // acc(a) - acc(b)
  double diff_stderr = 0;
  double p_value = 1;  // exact two-sided McNemar (binomial on the discordant pairs)
};
PairedTest mcnemar(const std::vector<bool>& a, const std::vector<bool>& b);

Json metrics_to_json(const TaskMetrics& m);
Json paired_to_json(const PairedTest& p);

}  // namespace lm::eval
