// The training recipe of `lmtrain tokenizer`: one struct of options, each default documented next
// to it (as SentencePiece's own trainer_spec.proto does). Written into tokenizer.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lm::tokenizer {

struct TrainOptions {
  int64_t vocab_size = 32000;         // pieces incl. 4 specials and 256 byte-fallback pieces; 48-64k see docs
  std::string model_type = "unigram"; // SentencePiece model: unigram (default) or bpe
  double character_coverage = 0.9999; // share of sample characters that get their own piece; rarer ones go to bytes
  bool byte_fallback = true;          // unseen characters become <0xNN> byte pieces, so UNK never appears
  bool split_digits = true;           // every digit is its own piece (numbers tokenize uniformly)
  bool require_bengali = true;        // every Bengali letter, sign and digit (U+0980-U+09FF) seen is a required char
  std::string vocab_allocation = "per-language";  // "per-language": a unigram model per language on its own
                                      // text with its share of the vocabulary (language_vocab), merged into one
                                      // model (tokenizer/merge.h); a BPE model or a one-language sample is trained
                                      // joint. "joint": one model on the mixed sample (its EM shares the pieces out
                                      // by likelihood, so one language's text diversity takes the other's pieces).
                                      // Measured in docs/tokenizer.md
  std::string language_vocab;         // shares of the vocabulary, "bn:0.6,en:0.4"; empty = each language's
                                      // share of the sample's characters (see docs/tokenizer.md)
  int64_t max_sentence_length = 16384;  // bytes; longer lines are split at sentence ends before SentencePiece sees
                                        // them (its default, 4192, silently drops long Bengali lines)
  int64_t max_piece_length = 16;      // code points per piece
  int64_t sample_chars = 30000000;    // training sample size in code points, shared out by the manifest weights
  int64_t sample_spread = 16;         // a source with more text than its share is counted up to this many times
                                      // its share and its sample is spread evenly over that (0: over the whole
                                      // source; 1: its first documents, the pre-issue-31 sample)
  std::string fill = "same-language";  // a source with less text than its share gives all it has, and the rest
                                      // comes from: "same-language" = the other sources of its language (by
                                      // weight); a language short as a whole shrinks the sample so the asked
                                      // language mix holds; "other-languages" = every other source by weight
                                      // (the size holds, the language mix does not); "none" = every source cut
                                      // by the same factor (the exact source mix, a smaller sample). All warn.
  bool keep_ratio = false;            // legacy key (tokenizer.json before issue 31): true reads as fill "none"
  int64_t heldout_every = 50;         // every N-th document of each source is held out for the report (0 = none)
  bool dedup = true;                  // drop exact duplicate documents before sampling
  bool skip_invalid_utf8 = false;     // false: invalid UTF-8 is an error naming file:line; true: skip and count
  int64_t seed_sentencepiece_size = 1000000;  // unigram: initial seed pieces
  double shrinking_factor = 0.75;     // unigram: share of pieces kept per pruning round
  int64_t num_sub_iterations = 2;     // unigram: EM sub-iterations per round
  int64_t threads = 0;                // trainer threads (0 = all cores)
  template <class V>
  void visit(V& v) {
    v("vocab_size", vocab_size);
    v("model_type", model_type);
    v("character_coverage", character_coverage);
    v("byte_fallback", byte_fallback);
    v("split_digits", split_digits);
    v("require_bengali", require_bengali);
    v("vocab_allocation", vocab_allocation);
    v("language_vocab", language_vocab);
    v("max_sentence_length", max_sentence_length);
    v("max_piece_length", max_piece_length);
    v("sample_chars", sample_chars);
    v("sample_spread", sample_spread);
    v("fill", fill);
    v("keep_ratio", keep_ratio);
    v("heldout_every", heldout_every);
    v("dedup", dedup);
    v("skip_invalid_utf8", skip_invalid_utf8);
    v("seed_sentencepiece_size", seed_sentencepiece_size);
    v("shrinking_factor", shrinking_factor);
    v("num_sub_iterations", num_sub_iterations);
    v("threads", threads);
  }
};

// Per-language summary of the training sample.
struct LangSample {
  std::string lang;
  double weight_share = 0;  // the language's share of the manifest weights (the target)
  double char_share = 0;    // its share of the sample's code points (what was used)
  int64_t documents = 0, chars = 0, bytes = 0;
  int64_t available_chars = 0;  // read from the corpus before trimming to the ratio
  template <class V>
  void visit(V& v) {
    v("lang", lang);
    v("weight_share", weight_share);
    v("char_share", char_share);
    v("documents", documents);
    v("chars", chars);
    v("bytes", bytes);
    v("available_chars", available_chars);
  }
};

// Per language, what the vocabulary allocation gave it (vocab_allocation per-language).
struct LangVocab {
  std::string lang;
  double share = 0;     // its asked share of the normal pieces
  int64_t trained = 0;  // normal pieces of its own model
  int64_t kept = 0;     // of those, pieces in the merged model
  int64_t shared = 0;   // of the kept ones, pieces another language's model has too
  template <class V>
  void visit(V& v) {
    v("lang", lang);
    v("share", share);
    v("trained", trained);
    v("kept", kept);
    v("shared", shared);
  }
};

struct SampleSummary {
  std::vector<LangSample> languages;
  std::vector<LangVocab> vocab;  // empty for a joint model
  int64_t sentences = 0;
  int64_t long_lines_split = 0;  // lines longer than max_sentence_length, split at sentence ends (kept)
  int64_t lines_dropped = 0;     // lines dropped (always 0 here: a line with no break is cut at a code point)
  int64_t invalid_utf8_skipped = 0, empty_dropped = 0, duplicates_dropped = 0;
  int64_t required_chars = 0;    // Bengali code points passed as required_chars
  double seconds = 0;            // SentencePiece training time
  template <class V>
  void visit(V& v) {
    v("languages", languages);
    v("vocab", vocab);
    v("sentences", sentences);
    v("long_lines_split", long_lines_split);
    v("lines_dropped", lines_dropped);
    v("invalid_utf8_skipped", invalid_utf8_skipped);
    v("empty_dropped", empty_dropped);
    v("duplicates_dropped", duplicates_dropped);
    v("required_chars", required_chars);
    v("seconds", seconds);
  }
};

}  // namespace lm::tokenizer
