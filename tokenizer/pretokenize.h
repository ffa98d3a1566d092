// The Split pre-tokenizer of HF byte-level BPE tokenizers: a regex cuts text into pieces (HF
// `Split(pattern, behavior: Isolated)`: every match and every gap between matches is a piece), and
// BPE never merges across a piece. The regexes of Llama 3, Qwen2 and GPT-4o (o200k), and of Llama 3
// and Qwen2 with combining marks kept in words (llama3-marks, qwen35: vocabulary extension) are matched by
// hand-written code (as llama.cpp's unicode.cpp does): an order of magnitude faster than a regex
// engine and exact for any Unicode text (character classes from ICU: \p{L}, \p{N}, \p{M}, \s as
// the White_Space property, as Oniguruma has them). Any other pattern runs on ICU's regex engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lm::tokenizer {

// The Split regexes this file matches by hand, exactly as tokenizer.json spells them.
inline constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kGpt4oPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Llama 3's and Qwen2's patterns with \p{M} beside \p{L} in the letter run and the punctuation
// class: a combining mark (a Bangla vowel sign, virama, anusvara) stays inside its word. Text
// without combining marks splits exactly as under kLlama3Pattern / kQwen2Pattern. kQwen35Pattern is
// llama.cpp's "qwen35" pre-tokenizer (LLAMA_VOCAB_PRE_TYPE_QWEN35, its tokenizer.json form);
// llama.cpp has no pre-tokenizer with kLlama3MarksPattern.
inline constexpr const char* kLlama3MarksPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kQwen35Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A piece of the input: [begin, end) in bytes.
struct Span {
  uint32_t begin = 0, end = 0;
};

class Splitter {
 public:
  // Which matcher a pattern gets: one of the hand-written ones, or ICU's regex engine.
  enum class Kind { kLlama3, kQwen2, kGpt4o, kLlama3Marks, kQwen35, kRegex };
  // `pattern` as tokenizer.json holds it (pre_tokenizer Split.pattern.Regex). An invalid regex is
  // InvalidArgument naming `where`.
  static absl::StatusOr<Splitter> make(const std::string& pattern, const std::string& where);
  // Same spans as make(pattern) but always on ICU's regex engine (tests compare the two).
  static absl::StatusOr<Splitter> make_regex(const std::string& pattern, const std::string& where);

  // Appends the pieces of valid UTF-8 `text` (matches and the gaps between them, in order,
  // covering all of it) to `out`.
  void split(std::string_view text, std::vector<Span>* out) const;
  Kind kind() const { return kind_; }
  const std::string& pattern() const { return pattern_; }

 private:
  Kind kind_ = Kind::kLlama3;
  std::string pattern_;
  std::shared_ptr<const void> regex_;  // icu::RegexPattern for kRegex
};

}  // namespace lm::tokenizer
