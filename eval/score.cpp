#include "eval/score.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "corpus/corpus.h"

namespace lm::eval {

TokenRequest encode_pair(const Encoder& encode, std::string context, std::string continuation,
                         const TokenIds& prefix, bool* boundary_ok) {
  // Harness: n_spaces = len(context) - len(context.rstrip()) moves to the continuation.
  size_t keep = context.size();
  while (keep > 0 && std::isspace(static_cast<unsigned char>(context[keep - 1]))) --keep;
  if (keep < context.size()) {
    continuation = context.substr(keep) + continuation;
    context.resize(keep);
  }
  TokenRequest r;
  r.context = prefix;
  if (context.empty()) {
    // Harness: an empty context is the prefix token alone and the continuation is encoded alone.
    r.continuation = encode(continuation);
    if (boundary_ok) *boundary_ok = true;
    return r;
  }
  const TokenIds whole = encode(context + continuation);
  const TokenIds ctx = encode(context);
  const size_t n = std::min(ctx.size(), whole.size());
  if (boundary_ok) *boundary_ok = n == ctx.size() && std::equal(ctx.begin(), ctx.end(), whole.begin());
  // As the harness: the model sees encode(context) followed by the whole encoding's tail.
  r.context.insert(r.context.end(), ctx.begin(), ctx.end());
  r.continuation.assign(whole.begin() + n, whole.end());
  return r;
}

void decide(ExampleResult& ex) {
  auto argmax = [&](auto value) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(ex.choices.size()); ++i)
      if (value(ex.choices[i]) > value(ex.choices[best])) best = i;
    return best;
  };
  ex.pred = argmax([](const ChoiceResult& c) { return c.logprob; });
  ex.pred_norm = argmax([](const ChoiceResult& c) { return c.logprob / std::max<int64_t>(c.chars, 1); });
  ex.pred_bytes = argmax([](const ChoiceResult& c) { return c.logprob / std::max<int64_t>(c.bytes, 1); });
}

namespace {

// The requests of one example's choices; an empty continuation is an error.
absl::StatusOr<std::vector<TokenRequest>> encode_example(const McTask& task, const McExample& ex,
                                                         const Encoder& encode, const TokenIds& prefix,
                                                         int64_t* mismatches) {
  std::vector<TokenRequest> reqs;
  for (size_t c = 0; c < ex.contexts.size(); ++c) {
    bool ok = true;
    reqs.push_back(encode_pair(encode, ex.contexts[c], ex.continuations[c], prefix, &ok));
    if (reqs.back().continuation.empty())
      return absl::InvalidArgumentError(absl::StrCat(task.name, " example ", ex.id, " choice ", c,
                                                     ": the continuation encodes to no tokens"));
    *mismatches += !ok;
  }
  return reqs;
}

// The first choice whose continuation is longer than `window` (-1: none, or no window).
int too_long_choice(const std::vector<TokenRequest>& reqs, int64_t window) {
  for (size_t c = 0; window > 0 && c < reqs.size(); ++c)
    if (static_cast<int64_t>(reqs[c].continuation.size()) > window) return static_cast<int>(c);
  return -1;
}

ExampleResult example_result(const McExample& ex, const std::vector<std::vector<double>>& logprobs, size_t& k) {
  ExampleResult r;
  r.id = ex.id;
  r.gold = ex.gold;
  for (size_t c = 0; c < ex.contexts.size(); ++c, ++k) {
    ChoiceResult cr;
    for (double lp : logprobs[k]) cr.logprob += lp;
    cr.tokens = static_cast<int64_t>(logprobs[k].size());
    cr.chars = data::count_code_points(ex.norm_text[c]);
    cr.bytes = static_cast<int64_t>(ex.norm_text[c].size());
    r.choices.push_back(cr);
  }
  decide(r);
  return r;
}

}  // namespace

absl::StatusOr<TaskScoring> score_task(const McTask& task, const Encoder& encode, const Scorer& scorer,
                                       const TokenIds& prefix, int64_t window, bool strict) {
  TaskScoring out;
  for (size_t i = 0; i < task.examples.size(); ++i) {
    const McExample& ex = task.examples[i];
    int64_t mismatches = 0;
    LM_ASSIGN_OR_RETURN(std::vector<TokenRequest> reqs, encode_example(task, ex, encode, prefix, &mismatches));
    if (const int c = too_long_choice(reqs, window); c >= 0) {
      const auto n = static_cast<int64_t>(reqs[c].continuation.size());
      if (strict)
        return absl::InvalidArgumentError(absl::StrCat(
            task.name, " example ", ex.id, " choice ", c, ": the continuation is ", n,
            " tokens, longer than the model's context of ", window,
            " (--strict; without it such examples are skipped and counted; the harness refuses them)"));
      out.skipped.push_back({ex.id, c, n});
      continue;
    }
    out.boundary_mismatches += mismatches;
    for (auto& r : reqs) {
      out.truncated += window > 0 && static_cast<int64_t>(r.context.size() + r.continuation.size()) > window + 1;
      out.requests.push_back(std::move(r));
    }
    out.kept.push_back(i);
  }
  LM_ASSIGN_OR_RETURN(auto logprobs, scorer(out.requests));
  if (logprobs.size() != out.requests.size())
    return absl::InternalError(absl::StrCat("scorer returned ", logprobs.size(), " results for ",
                                            out.requests.size(), " requests"));
  size_t k = 0;
  for (size_t i : out.kept) out.examples.push_back(example_result(task.examples[i], logprobs, k));
  return out;
}

Metric mean_stderr(const std::vector<double>& xs) {
  Metric m;
  const double n = static_cast<double>(xs.size());
  if (xs.empty()) return m;
  for (double x : xs) m.mean += x;
  m.mean /= n;
  if (xs.size() < 2) return m;
  double ss = 0;
  for (double x : xs) ss += (x - m.mean) * (x - m.mean);
  m.stderr_ = std::sqrt(ss / (n - 1)) / std::sqrt(n);
  return m;
}

TaskMetrics task_metrics(const std::vector<ExampleResult>& results, double chance) {
  TaskMetrics m;
  m.n = static_cast<int64_t>(results.size());
  m.chance = chance;
  std::vector<double> a, an, ab;
  for (const auto& r : results) {
    a.push_back(r.correct());
    an.push_back(r.correct_norm());
    ab.push_back(r.correct_bytes());
  }
  m.acc = mean_stderr(a);
  m.acc_norm = mean_stderr(an);
  m.acc_bytes = mean_stderr(ab);
  return m;
}

PairedTest mcnemar(const std::vector<bool>& a, const std::vector<bool>& b) {
  PairedTest p;
  p.n = static_cast<int64_t>(std::min(a.size(), b.size()));
  std::vector<double> d;
  for (int64_t i = 0; i < p.n; ++i) {
    p.only_a += a[i] && !b[i];
    p.only_b += !a[i] && b[i];
    d.push_back(static_cast<double>(a[i]) - static_cast<double>(b[i]));
  }
  const Metric md = mean_stderr(d);
  p.diff = md.mean;
  p.diff_stderr = md.stderr_;
  // Exact McNemar: under H0 the discordant pairs split Binomial(m, 1/2);
  // p = min(1, 2 * P[X <= min(only_a, only_b)]), summed in log space for large m.
  const int64_t m = p.only_a + p.only_b;
  const int64_t k = std::min(p.only_a, p.only_b);
  if (m == 0) {
    p.p_value = 1.0;
    return p;
  }
  double tail = 0;
  for (int64_t i = 0; i <= k; ++i) {
    const double log_term = std::lgamma(m + 1.0) - std::lgamma(i + 1.0) - std::lgamma(m - i + 1.0) -
                            static_cast<double>(m) * std::log(2.0);
    tail += std::exp(log_term);
  }
  p.p_value = std::min(1.0, 2.0 * tail);
  return p;
}

Json metrics_to_json(const TaskMetrics& m) {
  if (m.n == 0)  // nothing scored (every example skipped): no number to show
    return Json{{"n", 0}, {"chance", m.chance}, {"acc", nullptr}, {"acc_stderr", nullptr}, {"acc_norm", nullptr},
                {"acc_norm_stderr", nullptr}, {"acc_bytes", nullptr}, {"acc_bytes_stderr", nullptr}};
  return Json{{"n", m.n},
              {"chance", m.chance},
              {"acc", m.acc.mean},
              {"acc_stderr", m.acc.stderr_},
              {"acc_norm", m.acc_norm.mean},
              {"acc_norm_stderr", m.acc_norm.stderr_},
              {"acc_bytes", m.acc_bytes.mean},
              {"acc_bytes_stderr", m.acc_bytes.stderr_}};
}

Json paired_to_json(const PairedTest& p) {
  return Json{{"test", "exact McNemar (two-sided), acc of model vs twin on the same examples"},
              {"n", p.n},
              {"model_only_correct", p.only_a},
              {"twin_only_correct", p.only_b},
              {"acc_diff", p.diff},
              {"acc_diff_stderr", p.diff_stderr},
              {"p_value", p.p_value}};
}

}  // namespace lm::eval
