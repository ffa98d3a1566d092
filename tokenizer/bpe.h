// The trap, built on purpose: a GPT-2-style byte-level BPE. Text is pre-split with GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (Radford et al. 2019, openai/gpt-2 encoder.py), here hand-written over ICU general categories.
// Bengali vowel signs, virama and nukta are marks (\p{M}), not letters, so every word is cut at
// each sign and no merge can cross the cuts: Bangla stays near 1.4 code points per token whatever
// the vocabulary. Used only as the baseline of the fertility report.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lm::tokenizer {

// GPT-2 pre-tokenization of UTF-8 text into pieces (views into `text`).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class ByteBpe {
 public:
  // Learns merges over the pre-tokenized words of `texts` (word counts, then the classic
  // pair-count loop of Sennrich et al. 2016 with incremental updates) until the vocabulary
  // (256 bytes + 4 reserved specials + merges) reaches `vocab_size` or no pair occurs twice.
  static ByteBpe train(const std::vector<std::string>& texts, int vocab_size);

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int merges() const { return static_cast<int>(pieces_.size()) - kFirstMerge; }

  static constexpr int kSpecials = 4;                 // ids 0..3 reserved, as in the main tokenizer
  static constexpr int kFirstMerge = kSpecials + 256;  // bytes are ids 4..259

 private:
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;
  std::vector<std::string> pieces_;                   // id -> bytes
  std::unordered_map<uint64_t, int32_t> merge_rank_;  // (left, right) -> merged id (= rank order)
};

}  // namespace lm::tokenizer
