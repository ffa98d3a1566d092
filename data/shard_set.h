// The shards/ folder written by `lmtrain prepare`: manifest.json plus *.lmtok token shards,
// train and val per language. ShardSet opens and validates it; the sampler reads from it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"

namespace lm::data {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kManifestFormat = "lmforge.shards";
// 2: "framing" recorded (required). 1: no framing; its shards hold text + eos (kLegacyFraming).
inline constexpr int kManifestVersion = 2;

// One shard as manifest.json lists it; `path` is relative to the shards folder.
struct ShardEntry {
  std::string path;
  std::string lang;
  std::string split;  // "train" or "val"
  uint64_t tokens = 0;
  uint64_t docs = 0;
  std::string source;  // corpus source id (corpus::source_id); empty in older manifests: the
                       // language's shards are then one source
};

// Per-language counts that `prepare` reports (train + val unless named).
struct LanguageReport {
  uint64_t docs = 0;
  uint64_t chars = 0;  // Unicode code points of the document text
  uint64_t bytes = 0;  // UTF-8 bytes of the document text
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  uint64_t train_docs = 0;
  uint64_t val_docs = 0;
  double weight = 0;         // mixture weight from corpus.json (sum over the language's sources)
  double token_share = 0;    // share of training windows the sampler draws from this language
  double natural_share = 0;  // share of training tokens the language has on disk
  template <class V>
  void visit(V& v) {
    v("docs", docs); v("chars", chars); v("bytes", bytes); v("train_tokens", train_tokens);
    v("val_tokens", val_tokens); v("train_docs", train_docs); v("val_docs", val_docs); v("weight", weight);
    v("token_share", token_share); v("natural_share", natural_share);
  }
};

// Per-source counts and the source's share of the training mixture (docs/data.md, "weight").
struct SourceReport {
  std::string id;    // corpus source id; shards carry it in ShardEntry::source
  std::string lang;
  double weight = 0;  // from corpus.json
  uint64_t docs = 0;
  uint64_t chars = 0;
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  double share = 0;          // weight / sum of the weights of sources with training tokens (0 if none)
  double natural_share = 0;  // share of all training tokens on disk
  template <class V>
  void visit(V& v) {
    v("id", id); v("lang", lang); v("weight", weight); v("docs", docs); v("chars", chars);
    v("train_tokens", train_tokens); v("val_tokens", val_tokens); v("share", share);
    v("natural_share", natural_share);
  }
};

struct ShardManifest {
  std::string tokenizer_hash;
  int32_t vocab_size = 0;
  int32_t eos_id = -1;
  int32_t bos_id = -1;
  std::string tokenizer_dir;               // relative to the shards folder (absolute in older manifests)
  tokenizer::Framing framing;              // how prepare laid out each document (the tokenizer's)
  std::map<std::string, double> weights;   // per language (sum over its sources with training
                                           // tokens); empty = by token count
  std::vector<ShardEntry> shards;
  std::map<std::string, LanguageReport> languages;
  std::vector<SourceReport> sources;       // corpus order; empty in older manifests
  Json prepare = Json::object();           // options and throughput of the prepare run
};

Json manifest_to_json(const ShardManifest& m);
// Strict: unknown keys and wrong types are errors naming `source` and the dotted path.
absl::StatusOr<ShardManifest> manifest_from_json(const Json& j, const std::string& source);
// Writes dir/manifest.json atomically.
absl::Status write_manifest(const std::string& dir, const ShardManifest& m);

// What a run trains on per language and split.
struct DatasetInfo {
  std::string lang;
  std::string split;
  std::vector<std::string> shards;  // full paths
  uint64_t tokens = 0;
};

class ShardSet {
 public:
  // Reads dir/manifest.json and opens every shard it lists, checking each header against the
  // manifest (tokens, docs, tokenizer hash, vocab) and, with verify_checksum, the payload CRC.
  static absl::StatusOr<ShardSet> open(const std::string& dir, bool verify_checksum = true);

  // Every shard must carry this tokenizer hash and vocabulary size (the tokenizer's, not a
  // padded embedding size); the error names the shard, both values and what to do.
  absl::Status check_tokenizer(const std::string& hash, int32_t vocab) const;
  // The above for `tok`, plus its framing must equal the shards' (manifest.json): a model trained
  // on shards of another framing would see BOS where it never saw one, or miss it. The error
  // names both files and says to re-run prepare.
  absl::Status check_tokenizer(const tokenizer::Tokenizer& tok) const;

  const std::string& dir() const { return dir_; }
  // The tokenizer prepare used: the manifest's tokenizer.dir resolved against this folder (an
  // absolute path, as older manifests hold, is kept as it is).
  std::string tokenizer_path() const;
  const ShardManifest& manifest() const { return manifest_; }
  const std::string& tokenizer_hash() const { return manifest_.tokenizer_hash; }
  int32_t vocab_size() const { return manifest_.vocab_size; }
  int32_t eos_id() const { return manifest_.eos_id; }
  const tokenizer::Framing& framing() const { return manifest_.framing; }
  // Mixture weights recorded by prepare (may be empty).
  const std::map<std::string, double>& weights() const { return manifest_.weights; }

  // Sorted languages that have at least one shard in `split` ("train" / "val").
  std::vector<std::string> languages(const std::string& split) const;
  uint64_t tokens(const std::string& lang, const std::string& split) const;
  std::vector<DatasetInfo> datasets() const;

  // Readers of one language and split, in manifest order.
  std::vector<ShardReader> readers(const std::string& lang, const std::string& split) const;
  // Sources of a language with shards in `split`, in order of first shard ("" for the shards of
  // an older manifest, which name none), and the readers of one of them.
  std::vector<std::string> sources(const std::string& lang, const std::string& split) const;
  std::vector<ShardReader> readers(const std::string& lang, const std::string& split,
                                   const std::string& source) const;
  // The manifest's report of source `id`, or null.
  const SourceReport* source_report(const std::string& id) const;
  const std::vector<ShardReader>& all_readers() const { return readers_; }

 private:
  std::string dir_;
  ShardManifest manifest_;
  std::vector<ShardReader> readers_;  // parallel to manifest_.shards
};

}  // namespace lm::data
