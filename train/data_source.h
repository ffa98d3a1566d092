// Glue between the data pipeline and the trainer: the BatchSampler as a BatchSource, and the
// validation windows per language.
#pragma once

#include "data/sampler.h"
#include "data/shard_set.h"
#include "train/trainer.h"

namespace lm::train {

class SamplerSource : public BatchSource {
 public:
  explicit SamplerSource(data::BatchSampler sampler) : sampler_(std::move(sampler)) {}
  void next(std::vector<int32_t>* out) override { sampler_.next(out); }
  Json cursor() const override { return sampler_.cursor(); }
  absl::Status restore(const Json& cursor) override { return sampler_.restore(cursor); }
  const data::BatchSampler& sampler() const { return sampler_; }

 private:
  data::BatchSampler sampler_;
};

// Up to `max_windows` validation windows of seq_len+1 tokens for every language with a val split.
absl::StatusOr<ValSets> load_validation(const data::ShardSet& set, int64_t seq_len, int64_t max_windows);

}  // namespace lm::train
