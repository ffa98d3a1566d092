// Tokenizer: a model file plus its metadata (tokenizer.json: type, special ids, content hash,
// framing, recipe). The model is one of three kinds (TokenizerMeta::type):
//   "sentencepiece"  lmforge's own spm.model ('lmtrain tokenizer'), or a checkpoint's own
//                    SentencePiece tokenizer.model (Llama 2), with that model's special ids;
//   "hf-bpe"         a checkpoint's HF tokenizer.json (byte-level BPE: Llama 3, Qwen2), kept as
//                    hf-tokenizer.json (tokenizer.json is this metadata's name).
// 'lmtrain tokenizer --import HF_DIR' makes the folder for a checkpoint (import_hf.h).
// Cheap to copy: the processor is shared and immutable, and encode/decode are safe to call from
// many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/recipe.h"
#include "tokenizer/spm_bridge.h"
#include "tokenizer/spm_words.h"

namespace lm::tokenizer {

// Fixed special-token ids (every tokenizer this project trains uses them).
inline constexpr int32_t kUnkId = 0;
inline constexpr int32_t kBosId = 1;
inline constexpr int32_t kEosId = 2;
inline constexpr int32_t kPadId = 3;

// How every document is laid out in the token stream, the one rule that prepare (shards), fit
// (checks the shards against it), lmeval sample/mc/nll (the token before a text) and the exports
// (add_bos_token) follow: [bos if `bos`] + encode(text) + [eos if `eos`]. docs/data.md, "Framing".
struct Framing {
  bool bos = true;  // a BOS before each document: the model sees BOS where a text starts
  bool eos = true;  // an EOS after each document (required: documents are split at EOS)
  template <class V>
  void visit(V& v) {
    v("bos", bos);
    v("eos", eos);
  }
  bool operator==(const Framing& o) const { return bos == o.bos && eos == o.eos; }
  bool operator!=(const Framing& o) const { return !(*this == o); }
  // "bos + text + eos" / "text + eos", for messages and result files. Inline: the manifest
  // parser (data/shard_set.cpp) uses it and is built without this library for the fuzzers.
  std::string describe() const { return std::string(bos ? "bos + " : "") + "text" + (eos ? " + eos" : ""); }
};
// What `lmtrain tokenizer` writes into tokenizer.json (and what a tokenizer made in memory has).
inline constexpr Framing kFraming{true, true};
// A tokenizer.json without "framing" was written before the framing was recorded, when prepare
// wrote text + eos and no BOS: it reads as that, so an old tokenizer and its old shards still
// agree (and a new tokenizer with old shards is refused by fit).
inline constexpr Framing kLegacyFraming{false, true};

inline constexpr const char* kModelFile = "spm.model";
inline constexpr const char* kMetaFile = "tokenizer.json";
inline constexpr const char* kForeignSpmFile = "tokenizer.model";   // a checkpoint's SentencePiece model
inline constexpr const char* kHfJsonFile = "hf-tokenizer.json";     // a checkpoint's HF tokenizer.json
inline constexpr const char* kTypeSentencePiece = "sentencepiece";
inline constexpr const char* kTypeHfBpe = "hf-bpe";

// tokenizer.json, read strictly. `recipe` and `training` are written by the trainer for people
// and are not interpreted on load.
struct TokenizerMeta {
  int64_t format_version = 1;
  std::string type = "sentencepiece";
  std::string model_type = "unigram";
  std::string model_file = kModelFile;
  std::string hash;  // fnv1a64 of the model file's bytes, 16 hex digits
  // Ids are in [0, vocab_size). For an imported tokenizer the checkpoint's embedding rows
  // (config.json vocab_size), which may exceed the tokenizer's own ids (Qwen2: 151,936 > 151,665).
  int64_t vocab_size = 0;
  int64_t unk_id = kUnkId, bos_id = kBosId, eos_id = kEosId, pad_id = kPadId;
  std::string normalization = "nfc+bengali (rule table in spm.model; see docs/tokenizer.md)";
  std::string icu_version;
  Framing framing = kLegacyFraming;  // absent in a tokenizer.json: the framing before it was recorded
  TrainOptions recipe;    // how it was trained (for people; not interpreted on load)
  SampleSummary training; // what it was trained on
  std::string source;     // imported: the checkpoint folder and file it came from (for people)
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
    v("framing", framing);
    v("recipe", recipe);
    v("training", training);
    v("source", source);
  }
};

class Tokenizer {
 public:
  // `dir` holds tokenizer.json and the model file it names (spm.model, tokenizer.model or
  // hf-tokenizer.json). A missing file is NotFound, a model that does not parse is DataLoss, a model
  // whose hash or special ids differ from tokenizer.json is FailedPrecondition; each message names
  // the file and what to do. The framing is tokenizer.json's (not part of the content hash, which
  // names the model's vocabulary; shards record it themselves).
  static absl::StatusOr<Tokenizer> load(const std::string& dir);
  // From SentencePiece model bytes in memory (tests, the trainer before it writes the folder);
  // framing kFraming.
  static absl::StatusOr<Tokenizer> from_model_bytes(const std::string& bytes, const std::string& where);
  // From an HF tokenizer.json's text: ids from its post-processor template (BOS) and `eos_id`;
  // vocab_size the tokenizer's own (highest id + 1).
  static absl::StatusOr<Tokenizer> from_hf_json(const std::string& json_text, const std::string& where,
                                                int32_t eos_id);

  std::vector<int32_t> encode(std::string_view text) const;  // no bos/eos added
  // Splits the batch over `threads` workers (0 = all cores); the result is the same as encode().
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts, int threads = 0) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  int32_t vocab_size() const { return vocab_size_; }
  const Framing& framing() const { return framing_; }
  // The token the model saw right before a document's first text token: BOS with framing.bos,
  // else the previous document's EOS. What sample, mc and nll put before a text by default.
  int32_t start_id() const { return framing_.bos ? bos_ : eos_; }
  // A document's text ids framed as prepare writes them: [bos if framing.bos] + ids + [eos].
  std::vector<int32_t> frame(const std::vector<int32_t>& text_ids) const;
  bool is_byte(int32_t id) const;  // a byte-fallback piece <0xNN>
  std::string piece(int32_t id) const;
  const std::string& hash() const { return hash_; }
  const std::string& dir() const { return dir_; }
  const std::string& type() const { return type_; }  // kTypeSentencePiece or kTypeHfBpe
  const HfBpe* hf() const { return hf_.get(); }        // null unless type() is hf-bpe
  bool spm_words() const { return words_ != nullptr; }  // a foreign BPE tokenizer.model's word cache
  const SpmWords* spm_word_encoder() const { return words_.get(); }  // null unless spm_words()
  // Ids the model itself knows (the rest up to vocab_size() are embedding rows no text reaches).
  int32_t model_vocab_size() const;
  struct Ids {
    int32_t unk, bos, eos, pad, vocab_size, model_vocab;
  };

 private:
  std::shared_ptr<const bridge::Sp> sp_;
  std::shared_ptr<const HfBpe> hf_;
  std::shared_ptr<const SpmWords> words_;  // a foreign BPE tokenizer.model's faster exact encode
  std::string type_ = kTypeSentencePiece;
  std::string hash_, dir_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1, vocab_size_ = 0, model_vocab_ = 0;
  Framing framing_ = kFraming;
};

// Hash recorded in tokenizer.json for model bytes.
std::string model_hash(const std::string& model_bytes);

}  // namespace lm::tokenizer
