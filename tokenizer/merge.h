// One SentencePiece unigram model from models trained per language, each on its own text with its
// own share of the vocabulary (issue 31: in one model trained on the mixed sample, the language
// with more text or longer words takes the pieces; Chung et al. 2020, "Improving Multilingual
// Models with Language-Clustered Vocabularies", and XLM-V, Liang et al. 2023, allocate per
// language or cluster and take the union).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::tokenizer {

struct LanguageModel {
  std::string lang;
  std::string model;      // serialized unigram ModelProto trained on this language's text only
  double mixture = 0;     // the language's share of the text (its weight in the merged scores)
  double vocab_share = 0; // its share of the merged vocabulary's normal pieces
};

struct MergedLanguage {
  std::string lang;
  int64_t trained = 0;  // normal pieces of its own model
  int64_t kept = 0;     // of those, pieces in the merged model
  int64_t shared = 0;   // of those, pieces also kept from another language's model
};

// Merges `models` into one model of `vocab_size` pieces. The specials and byte pieces of the first
// model come first at their ids (every model must have the same ones). Every single-code-point
// piece is kept (no character of any language falls to bytes); the rest is taken by normalized
// rank: the piece of rank r (by score) in its language's model has key r / vocab_share, smallest
// key first, so each language keeps its best pieces in proportion to its share (a model must hold
// at least vocab_share of the room, or the merge says which is short). A piece's score is the
// log of the mixture of the languages' unigram probabilities, log(sum_l mixture_l * p_l(piece)),
// so the merged model is the unigram LM of the mixed text (Kudo 2018) with the languages'
// estimates. `stats` (optional) gets one entry per model.
absl::StatusOr<std::string> merge_unigram_models(const std::vector<LanguageModel>& models, int64_t vocab_size,
                                                 std::vector<MergedLanguage>* stats = nullptr);

}  // namespace lm::tokenizer
