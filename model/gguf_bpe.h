// A checkpoint's byte-level BPE tokenizer (HF tokenizer.json: Llama 3, Qwen2, or one extended by
// `lmtrain tokenizer --extend`) as llama.cpp's "gpt2" tokenizer in a GGUF file, the way
// convert_hf_to_gguf.py writes it (conversion/base.py, get_vocab_base): one token per embedding
// row, ids nothing uses as "[PAD<id>]" (UNUSED), the vocabulary's tokens as tokenizer.json spells
// them (ByteLevel-mapped, NORMAL), added tokens CONTROL when special or looking special ("<|...|>")
// and USER_DEFINED otherwise, the merges as "left right" in rank order.
//
// llama.cpp knows pre-tokenizers only by name (tokenizer.ggml.pre), and the name also fixes
// whether a piece that is itself a vocabulary entry skips the merges (HF's ignore_merges), so the
// Split regex and ignore_merges must be a pair llama.cpp implements (llama_cpp_pre). Measured with
// llama-cpp-python 0.3.36 on 300 lines each of Bangla and English (docs/export.md, "GGUF of an
// imported run"): the names below give HF tokenizers' ids on every line; llama.cpp's own "gpt-4o"
// does not keep combining marks (\p{M}) inside words whatever its comment says (197 of 300 Bangla
// lines differ), so GPT-4o's pattern is written as "granite-embed-multi-97m", the same regex with
// \p{M} and ignore_merges on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "model/gguf.h"
#include "model/hf_export.h"

namespace lm::model {

struct BpeVocab {
  std::vector<std::string> tokens;  // id -> text, one per embedding row
  std::vector<int32_t> types;       // NORMAL 1, CONTROL 3, USER_DEFINED 4, UNUSED 5 (llama.cpp's)
  std::vector<std::string> merges;  // "left right", rank order
  std::string pattern;              // the pre-tokenizer's Split regex
  bool ignore_merges = false;       // model.ignore_merges
};

// Reads tokenizer.json text (`where` names it in errors) for a model of `rows` embedding rows.
// Not byte-level BPE, a pre-tokenizer other than Split + ByteLevel, or an id >= rows:
// InvalidArgument / FailedPrecondition naming the field.
absl::StatusOr<BpeVocab> read_bpe_vocab(const std::string& json_text, int64_t rows, const std::string& where);

// llama.cpp's tokenizer.ggml.pre for a Split regex and ignore_merges; Unimplemented saying why and
// what to do for a pair llama.cpp has no pre-tokenizer for (e.g. `tokenizer --extend --split
// llama3-marks`: extend with --split gpt-4o, or export --format hf).
absl::StatusOr<std::string> llama_cpp_pre(const std::string& pattern, bool ignore_merges, const std::string& where);

// tokenizer.ggml.* of a byte-level BPE vocabulary: model "gpt2", `pre`, tokens, token_type,
// merges, the special ids the run's tokenizer names (absent ones are left out) and add_bos_token
// from its framing.
void add_bpe_tokenizer_metadata(GgufWriter& w, const BpeVocab& v, const std::string& pre, const SpecialTokens& sp);

// The text tokenizer.json gives token `id` ("" when out of range): the HF export's
// tokenizer_config.json names BOS/EOS/PAD by it.
std::string bpe_token_text(const BpeVocab& v, int64_t id);

}  // namespace lm::model
