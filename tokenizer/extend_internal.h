// Parts of the vocabulary extension shared by extend.cpp (reading, training) and
// extend_write.cpp (the extended tokenizer.json, pruning, the output folder). Not a public API.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "tokenizer/extend.h"
#include "tokenizer/extend_merges.h"
#include "tokenizer/train.h"

namespace lm::tokenizer {

struct BaseTokenizer {
  Tokenizer tok;  // vocab_size(): the checkpoint's rows, where new ids start
  Json hf_json;   // its hf-tokenizer.json
  Json meta;      // its tokenizer.json
  std::string spm_bytes;  // its tokenizer.model (a SentencePiece base)
  std::string dir;
};

// The corpus words a new token could reach: their text, base ids and counts.
struct Corpus {
  std::vector<std::string> text;
  WordBag bag;
  int64_t words = 0;  // all pieces of the sample, counted or not
};

// The new merges in rank order; merges[i] makes id first_id + i with bytes[i] (left = right = -1:
// a token that is no merge, a SentencePiece base's new character).
struct NewTokens {
  int32_t first_id = 0;
  std::vector<NewMerge> merges;
  std::vector<std::string> bytes;
};

// The base's hf-tokenizer.json has the one Split step the new pattern replaces.
absl::Status check_base_json(const BaseTokenizer& b, const std::string& where);

// Writes tokenizer.json, hf-tokenizer.json and extension.json into `dir` (made), after pruning the
// new tokens no text reaches (with the merges built on them) until every one is reached. Returns
// how many were pruned.
absl::StatusOr<int64_t> write_extension(const BaseTokenizer& b, NewTokens& t, const Corpus& corpus,
                                        const ExtendOptions& o, const std::string& pattern, const std::string& dir);

// Writes the extended tokenizer's model files (tokenizer.json, the model, extension.json) into
// `dir` (made) after the reachability pruning; returns how many new tokens were pruned.
using ExtensionWriter = std::function<absl::StatusOr<int64_t>(const std::string& dir)>;

// The SentencePiece path (extend_spm.cpp): learns the new pieces of a BPE tokenizer.model (Llama 2)
// and fills r's counts; the writer writes them. `b` must outlive the writer.
absl::StatusOr<ExtensionWriter> prepare_spm_extension(const ExtendOptions& o, const BaseTokenizer& b,
                                                      const TrainingSample& sample, ExtendResult& r);

// Drops the `dead` tokens and every merge built on one, renumbering the rest from first_id in
// rank order. Returns how many were dropped.
int64_t prune(NewTokens& t, const std::vector<char>& dead);

// Lower-case hex of bytes (extension.json's bytes_hex).
std::string hex_bytes(std::string_view bytes);
// `dir` and its parents.
absl::Status make_dirs(const std::string& dir);

// fertility.json in `dir`: the base and the extended tokenizer on the same texts.
absl::Status write_extension_report(const ExtendResult& r, const TrainingSample& sample, const ExtendOptions& o,
                                    const std::string& dir);

}  // namespace lm::tokenizer
