// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Llama 3, Qwen2, GPT-4o-style
// vocabularies), giving the ids HF `tokenizers` gives: added/special tokens are cut out of the raw
// text first (leftmost-longest), the rest is normalized (none or NFC), split by the Split regex
// (pretokenize.h), mapped to bytes (ByteLevel) and merged by rank (BPE, with ignore_merges: a piece
// that is a vocabulary entry is one token). The post-processor's template gives the ids HF frames
// a text with (Llama 3: BOS before it). Immutable once parsed; encode is safe from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "core/status.h"
#include "tokenizer/pretokenize.h"

namespace lm::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false;  // absorb white space on that side when matched
};

class HfBpe {
 public:
  // Parses tokenizer.json's text; `where` names the file in errors. Anything this class does not
  // implement (another model type, normalizer or pre-tokenizer, BPE dropout, ...) is
  // InvalidArgument naming the field.
  static absl::StatusOr<std::shared_ptr<const HfBpe>> parse(const std::string& json_text, const std::string& where);

  void encode(std::string_view text, std::vector<int32_t>* ids) const;  // no template tokens
  // The BPE of one pre-tokenized piece's bytes (no added tokens, normalizer or split; ignore_merges
  // as configured): what encode gives for a piece. The vocabulary extension trains on it.
  void encode_word(std::string_view bytes, std::vector<int32_t>* ids) const { encode_piece(bytes, ids); }
  // The bytes a token stands for (an added token: its text).
  const std::string& token_bytes(int32_t id) const { return bytes_[id]; }
  std::string decode(const std::vector<int32_t>& ids) const;             // unknown ids are skipped

  int32_t vocab_size() const { return static_cast<int32_t>(token_.size()); }  // highest id + 1
  // The id of a token by its tokenizer.json text (vocabulary or added token), or -1.
  int32_t token_id(const std::string& token) const;
  const std::string& token(int32_t id) const { return token_[id]; }  // as tokenizer.json spells it
  bool is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }
  // The post-processor's single-text template: ids before and after the text.
  const std::vector<int32_t>& template_prefix() const { return prefix_; }
  const std::vector<int32_t>& template_suffix() const { return suffix_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const std::string& normalizer() const { return normalizer_; }  // "none" or "nfc"
  const Splitter& splitter() const { return splitter_; }
  bool ignore_merges() const { return ignore_merges_; }
  size_t merge_count() const { return merges_.size(); }

  // Turns ignore_merges off (the tests show a check fails without it).
  std::shared_ptr<const HfBpe> without_ignore_merges() const;

 private:
  friend struct HfJsonParser;
  struct Merge {
    int32_t rank = 0, id = 0;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  void encode_plain(std::string_view text, std::vector<int32_t>* ids) const;  // no added tokens
  void encode_piece(std::string_view bytes, std::vector<int32_t>* ids) const;
  void merge_symbols(std::vector<int32_t>& symbols) const;

  std::vector<std::string> token_;   // id -> tokenizer.json text ("" for an unused id)
  std::vector<std::string> bytes_;   // id -> the bytes it stands for
  std::vector<uint8_t> special_;
  absl::flat_hash_map<std::string, int32_t> vocab_;  // model vocabulary: bytes -> id
  absl::flat_hash_map<uint64_t, Merge> merges_;      // (left, right) -> rank, merged id
  std::array<int32_t, 256> byte_id_{};              // a single byte's id (-1: none)
  std::vector<AddedToken> added_;                     // longest first
  std::array<bool, 256> added_first_byte_{};
  std::string normalizer_ = "none";
  Splitter splitter_;
  bool has_splitter_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> prefix_, suffix_;
  uint64_t cache_tag_ = 0;  // tells this model's per-thread cache from another's
};

// The GPT-2 ByteLevel map: byte -> the code point tokenizer.json writes it as (printable bytes
// stand for themselves, the others are shifted to U+0100 and up).
const std::array<char32_t, 256>& byte_to_unicode();

}  // namespace lm::tokenizer
