// The run's SentencePiece model as a Hugging Face `tokenizers` tokenizer.json, so that
// AutoTokenizer (transformers 5: tokenizers only) encodes exactly as SentencePiece does.
//
// Without it transformers 5 converts tokenizer.model through LlamaTokenizer, which is a BPE model:
// on a unigram tokenizer that gives other ids on most lines (docs/export.md). The layout follows
// transformers' SpmConverter.build_tokenizer_from_spm_proto (legacy=False): Unigram(pieces,
// scores, unk_id, byte_fallback); normalizer Precompiled(the model's precompiled_charsmap, which
// carries lmforge's NFC + Bengali rules) then SentencePiece's whitespace steps; Metaspace(▁,
// prepend "first") for add_dummy_prefix; BOS prepended by a TemplateProcessing post-processor when
// the tokenizer's framing has BOS (SpecialTokens::add_bos).
#pragma once

#include <string>

#include "core/config.h"
#include "core/status.h"
#include "model/hf_export.h"

namespace lm::model {

// `spm_model` is the serialized ModelProto (spm.model's bytes). Unimplemented for BPE models and
// models with user-defined pieces (the JSON would need merges / a Split pre-tokenizer).
absl::StatusOr<Json> hf_tokenizer_json(const std::string& spm_model, const SpecialTokens& sp,
                                       const std::string& source);

// RFC 4648 base64 with padding (tokenizers stores the charsmap so).
std::string base64(const std::string& bytes);

}  // namespace lm::model
