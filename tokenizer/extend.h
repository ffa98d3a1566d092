// Vocabulary extension: 'lmtrain tokenizer --extend BASE_TOK --corpus C --add N --split S --out EXT'.
// A SentencePiece BPE base (Llama 2's tokenizer.model) takes another path: extend_spm.cpp.
// From an imported byte-level BPE tokenizer (Llama 3, Qwen2) and a corpus, learns up to N new BPE
// merges for Bangla and writes a tokenizer folder whose vocabulary is the base's plus the new tokens:
//   - the corpus is cut with the new split pattern (S: llama3-marks, qwen35 or gpt-4o, which keep
//     combining marks inside words), each distinct word encoded by the base BPE (ignore_merges as
//     the base has it), and new merges learned on those ids (extend_merges.h), ranked after every
//     base merge, new ids from the base checkpoint's vocab size up: no existing id moves;
//   - a new token must hold a whole code point that is a combining mark or a Bengali letter
//     (--guard marks+bengali, the default; --guard marks: a combining mark), so text without one
//     never meets a new merge: under llama3-marks and qwen35 (which split mark-free text as
//     Llama 3 / Qwen2 do) English, code and numbers (Bengali digits too) tokenize exactly as under
//     the base;
//   - every new token is checked reachable (in the extended encoding of the corpus, or
//     encode(its text) == [its id]); the others are pruned with the merges built on them;
//   - EXT holds tokenizer.json (lmforge), hf-tokenizer.json (HF tokenizers loads it and gives the
//     same ids), extension.json ("lmforge-vocab-extension/1": base hash and sizes, split, new
//     tokens with their base pieces; what 'lmtrain extend-model' reads) and fertility.json with
//     the base and the extended tokenizer side by side. Written to a temporary folder and renamed.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tokenizer/report.h"
#include "tokenizer/tokenizer.h"

namespace lm::tokenizer {

inline constexpr const char* kExtensionFile = "extension.json";
inline constexpr const char* kExtensionFormat = "lmforge-vocab-extension/1";
inline constexpr int64_t kMaxAdd = 1000000;  // more new tokens than this is surely a typo

struct ExtendOptions {
  std::string base;    // a tokenizer folder ('lmtrain tokenizer --import') or an HF checkpoint folder
  std::string corpus;  // corpus manifest (corpus.json)
  std::string out;
  int64_t add = 0;                      // new tokens at most
  std::string split = "llama3-marks";   // llama3-marks | qwen35 | gpt-4o
  std::string guard = "auto";  // what a new token must hold: marks+bengali (a combining mark or a Bengali
                               // letter), marks (a combining mark: also mark-free Bangla stays as the base
                               // has it; 2.95 instead of 4.20 chars/token, docs), bengali (a mark or any
                               // Bengali-block character: digits too); auto: bengali for a SentencePiece
                               // base (Llama 2 spells Bengali digits in bytes), else marks+bengali
  int64_t sample_chars = 30000000;      // code points of the corpus read at most (bounded memory)
  int64_t heldout_every = 50;           // every N-th document is held out for the report
  int64_t min_count = 2;                // a pair seen fewer times in the corpus gets no token
  bool force = false;
  ReportOptions report;
};

// The Split regex (tokenizer.json form) of a --split name, or InvalidArgument listing the names.
absl::StatusOr<std::string> split_pattern(const std::string& name);

// Does a token with these bytes hold a whole code point the guard asks for? (marks: \p{M};
// marks+bengali: \p{M} or a letter of the Bengali block U+0980-U+09FF; bengali: \p{M} or any
// character of that block, digits and signs too.)
bool guard_allows(std::string_view bytes, const std::string& guard);

struct ExtendResult {
  Tokenizer base, extended;
  int64_t learned = 0;  // merges the trainer chose
  int64_t pruned = 0;   // of them, dropped as unreachable (or built on one)
  int64_t words = 0, distinct_words = 0;
  std::string split;  // the --split used, or "sentencepiece-words" (a SentencePiece base's own words)
  double seconds = 0;
};

// Everything is checked before EXT is written; a refused extension writes nothing.
absl::StatusOr<ExtendResult> extend_tokenizer(const ExtendOptions& o);

}  // namespace lm::tokenizer
