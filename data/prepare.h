// `lmtrain prepare`: corpus.json + a tokenizer -> shards/ (train and val token shards per
// language, manifest.json with the per-language report). docs/data.md describes the output.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "data/sampler.h"
#include "data/shard_set.h"

namespace lm::data {

struct PrepareOptions {
  std::string corpus;     // corpus.json
  std::string tokenizer;  // folder with spm.model + tokenizer.json
  std::string out;        // shards folder (created)
  double val_fraction = 0.005;         // share of documents (by content hash) held out per language
  bool skip_invalid_utf8 = false;      // false: invalid UTF-8 is an error naming file:line
  bool dedup = true;                   // drop exact duplicate documents (as the tokenizer's recipe does)
  uint64_t shard_tokens = 1ull << 26;  // tokens per shard before a new one starts (128 MiB at 16 bit)
  int threads = 0;                     // encoding threads (0 = all cores)
  int64_t batch_bytes = 4 << 20;       // text per encode_batch call
  double plan_tokens = 0;              // > 0: report the passes over each language and source that
                                       // training on this many tokens makes (warns above kMaxFreshPasses)
  // Not an option: asked between batches; nonzero (the signal number) stops prepare, which then
  // removes its staging folder and returns Cancelled saying so (lmtrain prepare: SIGINT/SIGTERM).
  std::function<int()> stop_signal;
  template <class V>
  void visit(V& v) {
    v("corpus", corpus);
    v("tokenizer", tokenizer);
    v("out", out);
    v("val_fraction", val_fraction);
    v("skip_invalid_utf8", skip_invalid_utf8);
    v("dedup", dedup);
    v("shard_tokens", shard_tokens);
    v("threads", threads);
    v("batch_bytes", batch_bytes);
    v("plan_tokens", plan_tokens);
  }
};

// True when a document goes to the validation split: a stable hash of its bytes, so the split is
// the same on every run and machine, and duplicates always land on the same side.
bool is_validation_doc(const std::string& doc, double val_fraction);

// Whether prepare may write into `out`: a missing or empty folder (or one holding only the
// staging folder of an interrupted prepare) is OK; one with shards (manifest.json or *.lmtok) is
// AlreadyExists saying so, one with other files AlreadyExists naming what it holds; `force`
// allows both (shards the new manifest does not list are then removed, other files left alone).
absl::Status check_output_folder(const std::string& out, bool force);

// Runs the whole preparation; returns the manifest it wrote to out/manifest.json. Shard files
// (*.lmtok) in `out` that the new manifest does not list are removed once it is written.
absl::StatusOr<ShardManifest> prepare(const PrepareOptions& options);

// Tables for people: per language (documents, characters, tokens per split, tokens per character,
// weight, natural and sampled token share), per source (documents, tokens, weight, share of the
// mixture) and, when prepare recorded a plan (--plan-tokens), the passes over each of them.
std::string format_report(const ShardManifest& manifest);

// The mixture the sampler draws by default from these shards: per source, its share and
// training tokens (per language for an older manifest).
std::vector<MixturePart> mixture_parts(const ShardManifest& manifest);

// Re-opens every shard of `dir` with full verification (and, when `tokenizer_dir` is not empty,
// checks the shards against that tokenizer); returns a summary or the first error.
absl::StatusOr<std::string> verify_shards(const std::string& dir, const std::string& tokenizer_dir = "");

}  // namespace lm::data
