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

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>* ids) const;
  std::shared_ptr<const bridge::Sp> raw_;  // the model with add_dummy_prefix, escaping and trimming off
  bool dummy_prefix_ = true;
  uint64_t cache_tag_ = 0;
};

}  // namespace lm::tokenizer
