// Deterministic, resumable batch sampler over the training shards, and the validation windows.
//
// The global stream: step s holds rows g = s*B*W ... (s+1)*B*W - 1 (B = batch per rank, W = world).
// The mixture's parts are streams, one per corpus source ("bn/news"; a language of an older
// manifest, whose shards name no source, is one stream "bn"). Row g draws its stream by a
// counter-based hash of (seed, g), then takes the stream's next window in that epoch's seeded
// permutation of all its windows, so every window is seen once per epoch (no overlapping random
// offsets). Rank r keeps rows [r*B, (r+1)*B) of each step: ranks are disjoint and together cover
// the stream. The whole state is the step counter and one consumed-window counter per stream,
// which is what cursor() saves.
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
  // Per language; empty = the per-source weights recorded by prepare (or the per-language ones
  // of an older manifest, or token counts when none were). A non-empty map sets each language's
  // total, shared among its sources by their weights; a language left out gets weight 0.
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
  // Errors (InvalidArgument) when the cursor's seed, seq_len, doc_aligned, weights or window counts
  // differ from this sampler's. Another batch or world is re-dealt (resharded_step).
  absl::Status restore(const Json& cursor);

  const SamplerConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // Languages drawn from, sorted, with their normalised probabilities and window counts.
  std::vector<std::string> languages() const;
  double probability(const std::string& lang) const;
  uint64_t windows(const std::string& lang) const;
  // Completed passes over a language's windows (a fraction: 1.5 = one and a half epochs).
  double epochs(const std::string& lang) const;

  // The streams ("lang/source", or "lang" for an older manifest), in draw order, with their
  // probabilities and window counts.
  struct Stream {
    std::string name, lang, source;
    double probability = 0;
    uint64_t windows = 0;
  };
  std::vector<Stream> streams() const;
  // Stream index of global row g (rows of every rank): what the draw picks, for tests and tools.
  int stream_of_row(uint64_t row) const { return pick_language(row); }

  // For tests and tools: the language index and (shard, offset) of global row g given the
  // consumed counter it gets. Exposed so tests can check coverage without decoding tokens.
  struct Location {
    int lang = 0;  // stream index
    int shard = 0;
    uint64_t offset = 0;
  };

 private:
  absl::StatusOr<int64_t> resharded_step(const Json& cursor) const;
  struct LangData {  // one stream
    std::string name;    // cursor key: "lang/source", or "lang" when the shards name no source
    std::string lang, source;
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

  int pick_language(uint64_t row) const;  // a stream index
  static absl::StatusOr<std::vector<std::pair<std::string, double>>> stream_weights(const ShardSet& set,
                                                                                  const SamplerConfig& cfg,
                                                                                  const std::string& lang);
  static absl::StatusOr<bool> add_stream(const ShardSet& set, const SamplerConfig& cfg, const std::string& lang,
                                         const std::string& source, double weight, Data* data);
  Location locate(int lang, uint64_t consumed) const;
  // Locations of this rank's rows at `step` given the consumed counters; advances the counters.
  void plan(int64_t step, std::vector<uint64_t>* consumed, std::vector<Location>* rows) const;

  SamplerConfig cfg_;
  std::shared_ptr<const Data> data_;  // immutable, shared by copies
  int64_t step_ = 0;
  std::vector<uint64_t> consumed_;    // per language, windows taken so far (all ranks)
};

// ---- Passes over the data for a token budget --------------------------------------------------
// Up to ~4 passes over the same text train about as well as fresh text; past that the value of
// repeated tokens decays fast (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models").
inline constexpr double kMaxFreshPasses = 4.0;

// One part of the mixture: its share of the drawn tokens and the tokens it has.
struct MixturePart {
  std::string lang, source;  // source empty: the whole language
  double share = 0;
  uint64_t tokens = 0;
};
struct Passes {
  std::string lang, source;  // source empty: the language's row (sum over its parts)
  double share = 0;
  uint64_t tokens = 0;  // available
  double drawn = 0;     // tokens drawn from it at the budget
  double passes = 0;    // drawn / tokens (infinite when tokens is 0 and drawn > 0)
};
// Rows per language (first) and per source for a budget of `tokens` drawn tokens.
std::vector<Passes> compute_passes(const std::vector<MixturePart>& parts, double tokens);
// Table for people, headed by the budget; `what` says where the budget comes from.
std::string format_passes(const std::vector<Passes>& rows, double tokens, const std::string& what);
// One warning (log_warn) naming each language and source drawn more than kMaxFreshPasses times
// (a language's only source is not named twice); returns how many it names.
int warn_passes(const std::vector<Passes>& rows, double tokens, const std::string& what);
// The sampler's parts: stream probabilities and windows * seq_len tokens.
std::vector<MixturePart> mixture_parts(const BatchSampler& sampler);
Json passes_to_json(const std::vector<Passes>& rows, double tokens);

// Deterministic validation windows of one language: seq_len + 1 tokens each, starting at
// 0, stride, 2*stride, ... inside each val shard in manifest order (stride 0 = seq_len, so every
// token is predicted once), at most max_windows (0 = all).
absl::StatusOr<std::vector<std::vector<int32_t>>> validation_windows(const ShardSet& set,
                                                                     const std::string& lang,
                                                                     int64_t seq_len,
                                                                     int64_t max_windows,
                                                                     int64_t stride = 0);

}  // namespace lm::data
