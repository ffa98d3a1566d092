// Per-token negative log-likelihood of a token stream under a model, with a stated window and
// stride, and the tokenizer-independent figures (bits per UTF-8 byte and per character).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "eval/score.h"

namespace lm::eval {

// tokens[0 .. first_target) are context only; tokens[first_target ..] are scored targets.
struct Window {
  TokenIds tokens;
  int64_t first_target = 1;
};

// Windows of at most seq_len + 1 tokens (seq_len inputs). stride <= 0 or >= seq_len:
// non-overlapping (each window starts where the previous one's inputs end, so every target
// after the first token is scored exactly once with 0..seq_len-1 tokens of context). 0 < stride
// < seq_len: sliding, window k starts at k*stride and scores only the targets no earlier window
// scored (the last `stride`), so each scored token sees at least seq_len - stride tokens of
// context. `max_targets` > 0 stops after that many scored tokens.
std::vector<Window> make_windows(const TokenIds& stream, int64_t seq_len, int64_t stride,
                                 int64_t max_targets = 0);

// The harness's definition (lm-evaluation-harness loglikelihood_rolling: get_rolling_token_windows
// with context_len 1, then make_disjoint_window), for one document `doc` (its tokens, no BOS or EOS;
// `prefix` is lmeval's Tokenizer::start_id(), BOS with the framing bos + text + eos):
// the first window is prefix + doc[:L-1] scoring doc[:L]; each later window scores the next
// min(L, rest) tokens with the L tokens before them as context (the last one overlaps the one
// before). Only the document's own tokens are scored: never the EOS after it.
std::vector<Window> harness_rolling_windows(const TokenIds& doc, int32_t prefix, int64_t seq_len);
// The documents of a token stream: the runs between EOS tokens, EOS dropped, empty runs skipped;
// a `bos` (>= 0) that opens a document is dropped too (shards framed bos + text + eos).
std::vector<TokenIds> split_documents(const TokenIds& stream, int32_t eos, int32_t bos = -1);

struct NllStats {
  int64_t tokens = 0;   // scored tokens
  double sum_nats = 0;  // sum of -log p over them
  int64_t bytes = 0;    // UTF-8 bytes of decode(scored tokens)
  int64_t chars = 0;    // code points of the same text
  double nats_per_token() const { return tokens ? sum_nats / tokens : 0; }
  double perplexity() const;
  double bits_per_byte() const;
  double bits_per_char() const;
};
Json nll_to_json(const NllStats& s);

// Scores the windows with `scorer`; `per_token` (optional) receives each window's NLLs.
absl::StatusOr<NllStats> score_windows(const std::vector<Window>& windows, const Scorer& scorer,
                                       std::vector<std::vector<double>>* per_token = nullptr);

// Fills bytes/chars from the decoded text of all scored targets, in stream order.
void count_text(NllStats& s, const std::vector<Window>& windows,
                const std::function<std::string(const TokenIds&)>& decode);

}  // namespace lm::eval
