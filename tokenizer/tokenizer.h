// Tokenizer: a trained SentencePiece model (spm.model) plus its metadata (tokenizer.json:
// special ids, content hash, recipe). Cheap to copy: the processor is shared and immutable,
// and encode/decode are safe to call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/recipe.h"
#include "tokenizer/spm_bridge.h"

namespace lm::tokenizer {

// Fixed special-token ids (every tokenizer this project trains uses them).
inline constexpr int32_t kUnkId = 0;
inline constexpr int32_t kBosId = 1;
inline constexpr int32_t kEosId = 2;
inline constexpr int32_t kPadId = 3;

inline constexpr const char* kModelFile = "spm.model";
inline constexpr const char* kMetaFile = "tokenizer.json";

// tokenizer.json, read strictly. `recipe` and `training` are written by the trainer for people
// and are not interpreted on load.
struct TokenizerMeta {
  int64_t format_version = 1;
  std::string type = "sentencepiece";
  std::string model_type = "unigram";
  std::string model_file = kModelFile;
  std::string hash;  // fnv1a64 of spm.model's bytes, 16 hex digits
  int64_t vocab_size = 0;
  int64_t unk_id = kUnkId, bos_id = kBosId, eos_id = kEosId, pad_id = kPadId;
  std::string normalization = "nfc+bengali (rule table in spm.model; see docs/tokenizer.md)";
  std::string icu_version;
  TrainOptions recipe;    // how it was trained (for people; not interpreted on load)
  SampleSummary training; // what it was trained on
  template <class V>
  void visit(V& v) {
    v("format_version", format_version);
    v("type", type);
    v("model_type", model_type);
    v("model_file", model_file);
    v("hash", hash);
    v("vocab_size", vocab_size);
    v("unk_id", unk_id);
    v("bos_id", bos_id);
    v("eos_id", eos_id);
    v("pad_id", pad_id);
    v("normalization", normalization);
    v("icu_version", icu_version);
    v("recipe", recipe);
    v("training", training);
  }
};

class Tokenizer {
 public:
  // `dir` holds spm.model and tokenizer.json. A missing file is NotFound, a model that does not
  // parse is DataLoss, a model whose hash or special ids differ from tokenizer.json is
  // FailedPrecondition; each message names the file and what to do.
  static absl::StatusOr<Tokenizer> load(const std::string& dir);
  // From model bytes in memory (tests, the trainer before it writes the folder).
  static absl::StatusOr<Tokenizer> from_model_bytes(const std::string& bytes, const std::string& where);

  std::vector<int32_t> encode(std::string_view text) const;  // no bos/eos added
  // Splits the batch over `threads` workers (0 = all cores); the result is the same as encode().
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts, int threads = 0) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  int32_t vocab_size() const { return vocab_size_; }
  bool is_byte(int32_t id) const;  // a byte-fallback piece <0xNN>
  std::string piece(int32_t id) const;
  const std::string& hash() const { return hash_; }
  const std::string& dir() const { return dir_; }

 private:
  std::shared_ptr<const bridge::Sp> sp_;
  std::string hash_, dir_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1, vocab_size_ = 0;
};

// Hash recorded in tokenizer.json for model bytes.
std::string model_hash(const std::string& model_bytes);

}  // namespace lm::tokenizer
