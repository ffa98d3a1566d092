// Fertility report: per language and text set, how much text a token carries (code points,
// grapheme clusters, bytes), tokens per word, share of words split, UNK and byte-fallback rates,
// exact round trips, bn/en parity on parallel text, token share vs character share of the
// training mix, and encoding speed. Written to tok/fertility.json and printed as a table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "tokenizer/train.h"

namespace lm::tokenizer {

struct ReportOptions {
  bool compare_baseline = false;              // also the GPT-2-style byte-level BPE at the same vocab
  std::vector<std::string> eval_texts;        // LANG=FILE (lines, or .jsonl with "text"); default: held-out docs
  std::string parallel;                       // JSONL {bn, en[, corpus, split]} (.gz ok)
  std::vector<std::string> parallel_corpora;  // corpus:split filters for `parallel` (empty = all)
  int64_t report_chars = 500000;              // code points per language and set, at most
  int64_t vocab_use_chars = 2000000;          // code points of each language's training text for its vocabulary use
  bool json_stdout = false;
  bool print_table = true;                    // false: only fertility.json (the sweep prints its own table)
  std::string encoder_name;                   // the tokenizer's name in the rows (empty: its type)
  std::string shown_dir;                      // the folder the closing line names (empty: out_dir; the
                                              // final folder when out_dir is a staging one)
};

// What the report needs of a tokenizer, so the baseline (and a vocabulary extension's base) is
// measured by the same code.
struct EncoderFns {
  std::string name;
  std::function<std::vector<int32_t>(std::string_view)> encode;
  std::function<std::string(const std::vector<int32_t>&)> decode;
  std::function<bool(int32_t)> is_unk, is_byte;
};
EncoderFns encoder_fns(const Tokenizer& tok);

struct FertilityRow {
  std::string encoder, set, lang;
  int64_t texts = 0, code_points = 0, graphemes = 0, bytes = 0, words = 0, tokens = 0;
  int64_t distinct_words = 0, distinct_words_split = 0, unk = 0, byte_tokens = 0, roundtrip_exact = 0;
  double cp_per_token = 0, graphemes_per_token = 0, bytes_per_token = 0, tokens_per_word = 0;
  double split_word_share = 0, unk_rate = 0, byte_fallback_rate = 0, roundtrip_rate = 0;
  template <class V>
  void visit(V& v) {
    v("encoder", encoder), v("set", set), v("lang", lang), v("texts", texts), v("code_points", code_points);
    v("graphemes", graphemes), v("bytes", bytes), v("words", words), v("tokens", tokens);
    v("distinct_words", distinct_words), v("distinct_words_split", distinct_words_split), v("unk", unk);
    v("byte_tokens", byte_tokens), v("roundtrip_exact", roundtrip_exact), v("cp_per_token", cp_per_token);
    v("graphemes_per_token", graphemes_per_token), v("bytes_per_token", bytes_per_token);
    v("tokens_per_word", tokens_per_word), v("split_word_share", split_word_share), v("unk_rate", unk_rate);
    v("byte_fallback_rate", byte_fallback_rate), v("roundtrip_rate", roundtrip_rate);
  }
};

// Measures `texts` (each is canonicalised first: NFC + Bengali fixes, as the tokenizer does).
FertilityRow measure_fertility(const EncoderFns& enc, const std::string& lang, const std::string& set,
                               const std::vector<std::string>& texts);

// Grapheme clusters (ICU extended grapheme clusters) of UTF-8 text.
int64_t count_graphemes(std::string_view utf8);

// Parallel pairs (bn, en) of a JSONL file, filtered by "corpus:split" names (empty = all).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read_parallel(
    const std::string& path, const std::vector<std::string>& corpora);

// Everything `lmtrain tokenizer` reports after training: fertility.json in out_dir + stdout;
// returns the report (fertility.json's content).
// `compare`: more tokenizers measured beside it on the same texts (a vocabulary extension's base).
absl::StatusOr<Json> write_report(const Tokenizer& tok, const TrainingSample& sample, const TrainOptions& recipe,
                                  const ReportOptions& options, const std::string& out_dir,
                                  const std::vector<EncoderFns>& compare = {});

}  // namespace lm::tokenizer
