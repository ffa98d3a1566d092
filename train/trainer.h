// The native C++ training loop of `lmtrain fit`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/config.h"
#include "train/config.h"

namespace lm::train {

class Comm;

// Where training windows come from: the data pipeline's BatchSampler in `lmtrain fit`,
// synthetic tokens in tests. next() fills micro_batch*(seq_len+1) tokens row-major.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void next(std::vector<int32_t>* out) = 0;
  virtual Json cursor() const = 0;
  virtual absl::Status restore(const Json& cursor) = 0;
};

// Validation windows [seq_len+1 tokens each] per language.
using ValSets = std::map<std::string, std::vector<std::vector<int32_t>>>;

struct FitRequest {
  std::string run_dir;
  bool resume = false;
  bool force = false;  // reuse an existing run folder without resuming
  model::ModelConfig model;
  TrainConfig train;
  std::string tokenizer_hash;
  Json data_info = Json::object();  // recorded in config.json (shards folder, tokenizer folder)
  int world_size = 1;
  int rank = 0;
  Comm* comm = nullptr;  // set for data-parallel runs (train/distributed.h)
  std::string init_from;  // HF folder from 'lmtrain export': start from its weights (not with resume)
};

struct FitSummary {
  int64_t start_step = 0;
  int64_t steps = 0;   // optimizer steps done in total (including before a resume)
  int64_t tokens = 0;  // tokens seen in total
  double seconds = 0;  // wall time of this invocation
  double tokens_per_s = 0;
  double mfu = 0;      // fraction of the device peak, 0 when unknown
  std::string peak_source;
  double final_loss = 0;
  std::map<std::string, double> val_loss;
  std::string checkpoint;
  int stop_signal = 0;  // set when SIGINT/SIGTERM ended the run after a checkpoint
  std::vector<double> losses;  // every step's training loss in this invocation
  int64_t nan_skipped = 0;     // updates skipped for a non-finite loss/gradient, whole run (train.nan_skip_limit)
  double step_s = 0;       // summed step time (zero_grad .. optimizer step) in this invocation
  double comm_wait_s = 0;  // of which blocked on the gradient all-reduce after backward (data parallel)
  int64_t buckets_synced = 0;        // gradient buckets all-reduced, summed over steps (data parallel)
  int64_t buckets_in_backward = 0;   // of which started from autograd hooks during backward (overlap)
  std::string summary() const;
};

// Validates the request, runs the start-up verification, trains, checkpoints.
// Errors: bad config or run folder (exit 2), non-finite loss/gradient (names step and parameter).
absl::StatusOr<FitSummary> fit(const FitRequest& req, BatchSource& source, const ValSets& val);

// The resolved run config written to runs/NAME/config.json.
Json run_config_json(const FitRequest& req);

}  // namespace lm::train
