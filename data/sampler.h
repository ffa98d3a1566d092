// Deterministic, resumable batch sampler over the training shards, and the validation windows.
//
// The global stream: step s holds rows g = s*B*W ... (s+1)*B*W - 1 (B = batch per rank, W = world).
// Row g draws its language from the mixture by a counter-based hash of (seed, g), then takes the
// language's next window in that epoch's seeded permutation of all its windows, so every window
// is seen once per epoch (no overlapping random offsets). Rank r keeps rows [r*B, (r+1)*B) of each
// step: ranks are disjoint and together cover the stream. The whole state is the step counter and
// one consumed-window counter per language, which is what cursor() saves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "data/shard.h"
#include "data/shard_set.h"

namespace lm::data {

struct SamplerConfig {
  int64_t batch = 8;      // rows per rank per step
  int64_t seq_len = 128;  // T; each row holds T + 1 tokens (inputs and shifted targets)
  uint64_t seed = 1234;
  int rank = 0;
  int world = 1;
  // Per language; empty = the weights recorded by prepare (or token counts when none were).
  // A language left out of a non-empty map gets weight 0.
  std::map<std::string, double> weights;
  // Windows start at document starts (a document longer than T continues in the next window).
  bool doc_aligned = false;
};

// Bijection on [0, n) keyed by `key`: a 4-round Feistel network with cycle walking, so an epoch's
// permutation needs no memory and any position is computed directly (Black & Rogaway 2002).
uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key);

class BatchSampler {
 public:
  static absl::StatusOr<BatchSampler> create(const ShardSet& set, const SamplerConfig& cfg);

  // Fills out with B*(T+1) tokens, row-major: this rank's rows of the next step.
  void next(std::vector<int32_t>* out);

  // The state that makes the next next() return the next unseen batch, plus the config it
  // belongs to. Same for every rank (the state is global), so any rank's cursor resumes all.
  Json cursor() const;
  // Errors (InvalidArgument) when the cursor's seed, batch, seq_len, world, doc_aligned, weights or
  // window counts differ from this sampler's.
  absl::Status restore(const Json& cursor);

  const SamplerConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // Languages drawn from, sorted, with their normalised probabilities and window counts.
  std::vector<std::string> languages() const;
  double probability(const std::string& lang) const;
  uint64_t windows(const std::string& lang) const;
  // Completed passes over a language's windows (a fraction: 1.5 = one and a half epochs).
  double epochs(const std::string& lang) const;

  // For tests and tools: the language index and (shard, offset) of global row g given the
  // consumed counter it gets. Exposed so tests can check coverage without decoding tokens.
  struct Location {
    int lang = 0;
    int shard = 0;
    uint64_t offset = 0;
  };

 private:
  struct LangData {
    std::string lang;
    double prob = 0;
    uint64_t key = 0;                   // hash of the language name, mixed into permutations
    std::vector<ShardReader> shards;
    std::vector<uint64_t> cum;          // cum[s] = windows in shards before s; size S+1
    std::vector<std::vector<uint64_t>> starts;  // doc_aligned: window starts per shard
  };
  struct Data {
    std::vector<LangData> langs;
    std::vector<double> cdf;  // cumulative probabilities, last == 1
  };

  int pick_language(uint64_t row) const;
  Location locate(int lang, uint64_t consumed) const;
  // Locations of this rank's rows at `step` given the consumed counters; advances the counters.
  void plan(int64_t step, std::vector<uint64_t>* consumed, std::vector<Location>* rows) const;

  SamplerConfig cfg_;
  std::shared_ptr<const Data> data_;  // immutable, shared by copies
  int64_t step_ = 0;
  std::vector<uint64_t> consumed_;    // per language, windows taken so far (all ranks)
};

// Deterministic validation windows of one language: seq_len + 1 tokens each, starting at
// 0, stride, 2*stride, ... inside each val shard in manifest order (stride 0 = seq_len, so every
// token is predicted once), at most max_windows (0 = all).
absl::StatusOr<std::vector<std::vector<int32_t>>> validation_windows(const ShardSet& set,
                                                                     const std::string& lang,
                                                                     int64_t seq_len,
                                                                     int64_t max_windows,
                                                                     int64_t stride = 0);

}  // namespace lm::data
