// A faster encode for a checkpoint's SentencePiece BPE model (Llama 2's tokenizer.model) that gives
// SentencePiece's own ids: the text is escaped as SentencePiece's identity normalizer does (a
// dummy "▁" prefix, ' ' -> "▁"), cut before every run of "▁" that follows a word, and each piece
// is encoded once per thread (a word cache, as HF tokenizers keeps) by the same model with its
// normalizer turned off. Exact when no vocabulary piece holds a "▁" after another character (no
// merge can cross such a cut; BPE's merges in one piece do not depend on the others) and the
// normalizer has no character map or user-defined symbols; make() checks that and returns null
// for any other model (lmforge's unigram spm.model with its NFC rule table keeps the plain path).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/spm_bridge.h"

namespace lm::tokenizer {

class SpmWords {
 public:
  static std::shared_ptr<const SpmWords> make(const std::string& model_bytes);
  void encode(std::string_view text, std::vector<int32_t>* ids) const;
  // Appends the ids of one escaped word (a piece for_each_word gives, or a vocabulary piece's text):
  // the model with its normalizer off.
  void encode_word(std::string_view word, std::vector<int32_t>* ids) const { encode_piece(word, ids); }
  bool dummy_prefix() const { return dummy_prefix_; }

  // Calls fn(word) for each escaped word of `text` in order ("▁" prefix when dummy_prefix, ' ' ->
  // "▁", a cut before every "▁" that follows another character): the pieces encode() encodes one
  // by one. `buf` holds the escaped text (the words point into it).
  template <class Fn>
  static void for_each_word(std::string_view text, bool dummy_prefix, std::string* buf, Fn fn);

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>* ids) const;
  std::shared_ptr<const bridge::Sp> raw_;  // the model with add_dummy_prefix, escaping and trimming off
  bool dummy_prefix_ = true;
  uint64_t cache_tag_ = 0;
};

template <class Fn>
void SpmWords::for_each_word(std::string_view text, bool dummy_prefix, std::string* buf, Fn fn) {
  constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space
  buf->clear();
  if (text.empty()) return;
  if (dummy_prefix) buf->append(kSpace);
  for (char c : text) {
    if (c == ' ') buf->append(kSpace);
    else buf->push_back(c);
  }
  const std::string_view s = *buf;
  size_t start = 0;
  for (size_t i = 1; i + kSpace.size() <= s.size(); ++i) {
    // A cut before a "▁" whose previous byte ends another character (not the "▁" before it).
    if (s.compare(i, kSpace.size(), kSpace) != 0 || (i >= 3 && s.compare(i - 3, 3, kSpace) == 0)) continue;
    fn(s.substr(start, i - start));
    start = i;
    i += kSpace.size() - 1;
  }
  fn(s.substr(start));
}

}  // namespace lm::tokenizer
