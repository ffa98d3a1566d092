#include "eval/nll.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "corpus/corpus.h"

namespace lm::eval {

std::vector<Window> make_windows(const TokenIds& stream, int64_t seq_len, int64_t stride,
                                 int64_t max_targets) {
  std::vector<Window> out;
  const int64_t n = static_cast<int64_t>(stream.size());
  if (n < 2 || seq_len < 1) return out;
  if (stride <= 0 || stride > seq_len) stride = seq_len;
  int64_t scored_until = 1;  // next target index not yet scored
  int64_t budget = max_targets > 0 ? max_targets : n;
  for (int64_t start = 0; scored_until < n && budget > 0; start += stride) {
    const int64_t end = std::min(n, start + seq_len + 1);  // exclusive
    Window w;
    const int64_t first = std::max(scored_until, start + 1);
    const int64_t last = std::min(end, first + budget);  // exclusive
    w.tokens.assign(stream.begin() + start, stream.begin() + last);
    w.first_target = first - start;
    budget -= last - first;
    scored_until = last;
    out.push_back(std::move(w));
    if (end == n) break;
  }
  return out;
}

std::vector<Window> harness_rolling_windows(const TokenIds& doc, int32_t prefix, int64_t seq_len) {
  std::vector<Window> out;
  const int64_t n = static_cast<int64_t>(doc.size());
  if (n == 0 || seq_len < 1) return out;
  const int64_t first = std::min(seq_len, n);
  Window w0;
  w0.tokens.push_back(prefix);
  w0.tokens.insert(w0.tokens.end(), doc.begin(), doc.begin() + first);
  w0.first_target = 1;
  out.push_back(std::move(w0));
  for (int64_t predicted = first; predicted < n;) {
    const int64_t pred = std::min(n - predicted, seq_len), end = predicted + pred;
    Window w;  // inputs doc[end-L-1 : end-1], targets the last `pred` of doc[.. end)
    w.tokens.assign(doc.begin() + (end - seq_len - 1), doc.begin() + end);
    w.first_target = static_cast<int64_t>(w.tokens.size()) - pred;
    out.push_back(std::move(w));
    predicted = end;
  }
  return out;
}

std::vector<TokenIds> split_documents(const TokenIds& stream, int32_t eos, int32_t bos) {
  std::vector<TokenIds> docs(1);
  for (int32_t t : stream) {
    if (t == eos) {
      if (!docs.back().empty()) docs.emplace_back();
    } else if (t == bos && docs.back().empty()) {
      continue;  // the framing's BOS: the rolling windows put their own prefix there
    } else {
      docs.back().push_back(t);
    }
  }
  if (docs.back().empty()) docs.pop_back();
  return docs;
}

double NllStats::perplexity() const { return std::exp(nats_per_token()); }
double NllStats::bits_per_byte() const { return bytes ? sum_nats / std::log(2.0) / bytes : 0; }
double NllStats::bits_per_char() const { return chars ? sum_nats / std::log(2.0) / chars : 0; }

Json nll_to_json(const NllStats& s) {
  return Json{{"tokens", s.tokens},
              {"sum_nats", s.sum_nats},
              {"nats_per_token", s.nats_per_token()},
              {"perplexity", s.perplexity()},
              {"bytes", s.bytes},
              {"chars", s.chars},
              {"bits_per_byte", s.bits_per_byte()},
              {"bits_per_char", s.bits_per_char()}};
}

absl::StatusOr<NllStats> score_windows(const std::vector<Window>& windows, const Scorer& scorer,
                                       std::vector<std::vector<double>>* per_token) {
  std::vector<TokenRequest> reqs;
  reqs.reserve(windows.size());
  for (const auto& w : windows) {
    TokenRequest r;
    r.context.assign(w.tokens.begin(), w.tokens.begin() + w.first_target);
    r.continuation.assign(w.tokens.begin() + w.first_target, w.tokens.end());
    reqs.push_back(std::move(r));
  }
  LM_ASSIGN_OR_RETURN(auto logprobs, scorer(reqs));
  NllStats s;
  for (size_t i = 0; i < logprobs.size(); ++i) {
    if (logprobs[i].size() != reqs[i].continuation.size())
      return absl::InternalError(absl::StrCat("window ", i, ": ", logprobs[i].size(), " scores for ",
                                              reqs[i].continuation.size(), " targets (window longer than max_seq_len?)"));
    for (auto& lp : logprobs[i]) {
      lp = -lp;
      s.sum_nats += lp;
    }
    s.tokens += static_cast<int64_t>(logprobs[i].size());
  }
  if (per_token) *per_token = std::move(logprobs);
  return s;
}

void count_text(NllStats& s, const std::vector<Window>& windows,
                const std::function<std::string(const TokenIds&)>& decode) {
  TokenIds targets;
  for (const auto& w : windows) targets.insert(targets.end(), w.tokens.begin() + w.first_target, w.tokens.end());
  const std::string text = decode(targets);
  s.bytes = static_cast<int64_t>(text.size());
  s.chars = data::count_code_points(text);
}

}  // namespace lm::eval
