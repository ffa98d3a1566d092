// Deterministic synthetic training rows for trainer tests: row g is a fixed pseudo-random
// sequence with a learnable pattern (token t+1 = token t + 1 mod V half of the time), so the
// loss falls. Rows are laid out like the data sampler's global stream: step s holds rows
// s*B*W ... (s+1)*B*W-1 and rank r reads [r*B, (r+1)*B) of them.
#pragma once

#include <filesystem>
#include <vector>

#include "train/trainer.h"

namespace lm::train::testing {

class SyntheticSource : public BatchSource {
 public:
  SyntheticSource(int64_t rows_per_rank, int64_t len, int64_t vocab, int rank = 0, int world = 1)
      : rows_(rows_per_rank), len_(len), vocab_(vocab), rank_(rank), world_(world) {}
  void next(std::vector<int32_t>* out) override {
    out->resize(rows_ * len_);
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t g = call_ * rows_ * world_ + rank_ * rows_ + r;
      uint64_t h = 0x9E3779B97F4A7C15ULL * (g + 1);
      int32_t tok = static_cast<int32_t>(h % vocab_);
      for (int64_t t = 0; t < len_; ++t) {
        h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 29;
        tok = (h % 2 == 0) ? (tok + 1) % vocab_ : static_cast<int32_t>(h % vocab_);
        (*out)[r * len_ + t] = tok;
      }
    }
    ++call_;
  }
  Json cursor() const override { return {{"call", call_}, {"rows", rows_ * world_}}; }
  // Rows of the global stream consumed: call x rows per call, re-dealt to this layout (as the data
  // sampler's cursor is, on a resume at another world size).
  absl::Status restore(const Json& c) override {
    if (!c.contains("call")) return absl::InvalidArgumentError("cursor has no call counter");
    const int64_t rows = c["call"].get<int64_t>() * c.value("rows", int64_t{0});
    if (rows % (rows_ * world_) != 0)
      return absl::InvalidArgumentError("cursor is from a batch layout this one cannot continue");
    call_ = rows / (rows_ * world_);
    return absl::OkStatus();
  }

 private:
  int64_t rows_, len_, vocab_;
  int rank_, world_;
  int64_t call_ = 0;
};

// The trainer tests' run: the `tiny` preset, 4 x 32 tokens per step on 2 threads, a log line
// every 5 steps, a checkpoint every 10, no validation. Tests change what they exercise.
inline FitRequest tiny_request(const std::filesystem::path& dir, int64_t steps) {
  FitRequest r;
  r.run_dir = dir.string();
  r.model = *model::preset("tiny");
  r.train.steps = steps;
  r.train.batch.micro_batch = 4;
  r.train.batch.seq_len = 32;
  r.train.schedule.warmup_steps = 5;
  r.train.logging.interval = 5;
  r.train.eval.interval = 0;
  r.train.checkpoint.interval = 10;
  r.train.hardware.threads = 2;
  r.tokenizer_hash = "tok-test";
  return r;
}

// fit() on a fresh SyntheticSource shaped for the request (one rank).
inline absl::StatusOr<FitSummary> fit_synthetic(const FitRequest& r) {
  SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
  return fit(r, src, {});
}

}  // namespace lm::train::testing
