// `lmtrain extend-model`: an HF checkpoint grown to an extended vocabulary (issue 37, part 3).
// `lmtrain tokenizer --extend` writes EXT_TOK/extension.json (format "lmforge-vocab-extension/1":
// base_tokenizer_hash, base_vocab_size, vocab_size, new_tokens [{id, token, bytes_hex,
// base_pieces}]) beside the extended hf-tokenizer.json (or tokenizer.model); this grows the
// checkpoint to match:
//   - config.json: vocab_size = the extension's vocab_size, every other key as it was;
//   - model.embed_tokens.weight and (untied) lm_head.weight: rows [0, base) byte-for-byte as stored,
//     a new token's row the mean of its base pieces' rows (computed in fp32, stored in the
//     tensor's dtype); a row without pieces is drawn as transformers' resize_token_embeddings(
//     mean_resizing=True) draws it: N(mean, 1e-9 * covariance) of the old rows, the mean alone
//     when that covariance is not positive definite;
//   - every other tensor copied out of the read-only mapping file by file, page by page: the
//     checkpoint never sits in RAM (the grown matrices' new rows do, in fp32);
//   - tokenizer.json = EXT_TOK/hf-tokenizer.json (or tokenizer.model = EXT_TOK/tokenizer.model for a
//     SentencePiece base, Llama 2); tokenizer_config.json, generation_config.json,
//     special_tokens_map.json copied; extension.json copied (it marks the folder as extended).
// Logits of base-vocabulary input are then bit-identical to the base's on the base columns: the
// old rows and every other weight are the same bytes.
// Written into OUT.partial-PID and renamed: a failure leaves no OUT (or the old one, with force).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::model {

inline constexpr char kVocabExtensionFormat[] = "lmforge-vocab-extension/1";
inline constexpr char kVocabExtensionFile[] = "extension.json";

struct VocabExtension {
  std::string base_tokenizer_hash;
  int64_t base_vocab_size = 0;  // the base checkpoint's embedding rows
  int64_t vocab_size = 0;       // the extended model's rows
  std::string split;
  struct Token {
    int64_t id = 0;
    std::string token;
    std::vector<int64_t> base_pieces;  // base ids whose rows' mean starts this token's row
  };
  std::vector<Token> new_tokens;
};

// Reads and checks extension.json: the format, sizes, ids unique in [base_vocab_size, vocab_size),
// pieces in [0, base_vocab_size). Errors name the file and the field.
absl::StatusOr<VocabExtension> read_vocab_extension(const std::string& path);

struct ExtendModelOptions {
  std::string hf_dir;         // the base checkpoint
  std::string tokenizer_dir;  // holds extension.json and hf-tokenizer.json or tokenizer.model
  std::string out;
  bool force = false;   // replace an existing `out`
  uint64_t seed = 0;    // the fallback's normal draws
  // The content hash (tokenizer::model_hash) of hf_dir's own tokenizer file, as `tokenizer
  // --import` records it; "" when the folder has none (then only the vocabulary size is checked).
  std::string base_tokenizer_hash;
};

struct ExtendModelReport {
  int64_t base_vocab_size = 0, vocab_size = 0;
  int64_t from_pieces = 0;  // new rows set to their pieces' mean
  int64_t from_normal = 0;  // new rows drawn from the fallback normal (per grown matrix)
  bool covariance_pd = true;  // false: the fallback rows are the mean (covariance not positive definite)
  std::vector<std::string> grown;  // tensor names
  std::string dtypes;              // of the grown tensors, "bf16"
  int64_t bytes_written = 0;      // tensor bytes (headers aside)
};

absl::StatusOr<ExtendModelReport> extend_hf_model(const ExtendModelOptions& o);

}  // namespace lm::model
