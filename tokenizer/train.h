// Training of the SentencePiece model from a corpus manifest: the per-language training sample
// (character ratio from the manifest weights), the recipe's SentencePiece options, and the
// output folder (spm.model, normalization.tsv, tokenizer.json).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "corpus/corpus.h"
#include "tokenizer/recipe.h"
#include "tokenizer/tokenizer.h"

namespace lm::tokenizer {

// What one corpus source gave the sample. Its asked share is weight / sum of weights; a source
// with less text gives all it has and the rest comes from where TrainOptions::fill says.
struct SourceSample {
  std::string id;           // data::source_id
  std::string lang;
  std::string description;  // data::describe_source, for messages
  double weight_share = 0;  // asked share of the sample
  int64_t asked_chars = 0;  // weight_share * sample_chars
  int64_t read_chars = 0;   // characters counted (all the source has when `exhausted`; else up to
                            // sample_spread times its budget, the stretch its sample is spread over)
  int64_t chars = 0;        // characters taken into the sample
  bool exhausted = false;   // the whole source was read
};

struct TrainingSample {
  std::vector<std::string> sentences;   // what SentencePiece trains on (lines, long ones split)
  std::vector<int32_t> sentence_lang;   // index into `langs` for each sentence
  std::vector<std::string> langs;       // in manifest order of first appearance
  std::map<std::string, std::vector<std::string>> heldout;  // lang -> held-out documents
  std::map<std::string, std::vector<std::string>> heldout_by_source;  // source id -> its held-out documents
  std::vector<SourceSample> sources;    // manifest order; empty for samples built in code
  SampleSummary summary;
};

// Reads the manifest's sources into a training sample: source i gets sample_chars * w_i / sum(w)
// characters (code points, line breaks not counted); a source that has less gives all it has and
// by default (fill "same-language") the other sources of its language fill the rest by weight; a
// language short as a whole cuts every language by the same factor, so the sample's language mix
// is the asked one. "other-languages" fills from every source, "none" cuts every source alike.
// Each shortfall is one warning line with the numbers. A source with more text than its budget is
// sampled evenly over up to sample_spread times its budget (whole documents, every k-th one), not
// read from its start only.
absl::StatusOr<TrainingSample> build_sample(const data::CorpusManifest& manifest, const TrainOptions& options);

// Splits `line` into pieces of at most `max_bytes` bytes, preferring sentence ends (। ? ! . then
// a space); a piece with no break is cut at a code point boundary. Returns the piece count.
int split_long_line(std::string_view line, size_t max_bytes, std::vector<std::string>* out);

// The SentencePiece options the recipe stands for (spm_train names); `rule_tsv_path` is the
// normalization table written beside the model.
std::unordered_map<std::string, std::string> spm_kwargs(const TrainOptions& options, const std::string& required_chars,
                                                        const std::string& rule_tsv_path);

// Trains and writes out_dir/{spm.model, normalization.tsv, tokenizer.json}; returns the loaded
// tokenizer. tokenizer.json records the framing kFraming (bos + text + eos). `summary` (copied into tokenizer.json) gets the training time.
absl::StatusOr<Tokenizer> train_tokenizer(const TrainingSample& sample, const TrainOptions& options,
                                          const std::string& out_dir, SampleSummary* summary);

// The serialized model without the fields that say where and with how many threads it was
// trained (the rule file's path, model_prefix, input, num_threads), so its content hash is the
// tokenizer's identity wherever it is written. A model that does not parse is returned as is.
// The hash covers spm.model only: the framing (tokenizer.json) is not part of it, so a shard's
// tokenizer hash names its vocabulary, and the shards' manifest records the framing on its own
// (ShardSet::check_tokenizer compares both with the run's tokenizer).
std::string portable_model_bytes(const std::string& model);

}  // namespace lm::tokenizer
