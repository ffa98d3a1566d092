// The native C++ training loop of `lmtrain fit`.
#pragma once

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "core/tensorboard.h"
#include "model/config.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/device.h"
#include "train/faults.h"
#include "train/grad_sync.h"
#include "train/optimizer_shards.h"
#include "train/optim.h"
#include "train/resume_point.h"
#include "train/step_graph.h"
#include "train/samples.h"
#include "train/startup_log.h"

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
  int local_rank = 0;    // this rank's GPU on its node (train.device cuda): cuda:<local_rank>
  Comm* comm = nullptr;  // set for data-parallel runs (train/distributed.h)
  std::string init_from;  // HF folder from 'lmtrain export': start from its weights (not with resume)
  bool new_data = false;  // resume on other shards (continued pretraining): the data cursor is not restored
  TextCodec codec;        // the run's tokenizer, for text samples at validation (train/samples.h); unset: none
  std::string hardware;   // how device and dtype were chosen (resolve_hardware), said at start-up; "": the trainer's
  StartupLog startup;     // phases timed before the trainer (set_up_run: "data open"); the trainer adds its own
  // The checkpoint a resume continues from, chosen (and verified) by set_up_run; unset: the
  // trainer chooses it (train/resume_point.h).
  std::optional<ResumePoint> resume_point;
};

struct FitSummary {
  int64_t start_step = 0;
  int64_t steps = 0;   // optimizer steps done in total (including before a resume)
  int64_t tokens = 0;  // tokens seen in total
  double seconds = 0;  // wall time of this invocation
  double tokens_per_s = 0;
  // MFU, the median over this invocation's log intervals (the first, warm-up, left out when there
  // are others): `mfu` against DevicePeak::flops (the data sheet on a GPU, the measured ceiling on a
  // CPU), `mfu_measured_peak` against the ceiling measured at start-up. 0 when unknown.
  double mfu = 0;
  double mfu_measured_peak = 0;
  int64_t mfu_intervals = 0;     // intervals the medians are over
  double peak_flops = 0;          // what `mfu` divides by (per device), FLOP/s
  double measured_peak_flops = 0; // what `mfu_measured_peak` divides by
  std::string peak_source;       // where peak_flops comes from
  std::string measured_peak;     // how measured_peak_flops was measured
  std::string peak_warning;      // judge_peak: the measured ceiling looks wrong ("" = plausible)
  std::string floor_warning;     // the throughput floor fired (train.logging.mfu_floor): its first line
  std::vector<std::string> fast_paths_verified;  // checked against their reference at start-up and kept
  bool cuda_graph_captured = false;  // train.hardware.cuda_graphs: a graph was captured and replayed
  int64_t rank_agreements = 0;   // data parallel: collectives of the stop/checkpoint agreement (stop_policy)
  int64_t micro_agreements = 0;  // data parallel: host-side stop agreements before micro-batches (drop_step_now)
  double final_loss = 0;
  std::map<std::string, double> val_loss;
  std::string checkpoint;
  int stop_signal = 0;  // set when SIGINT/SIGTERM ended the run after a checkpoint
  std::vector<double> losses;  // every step's training loss in this invocation
  std::vector<std::string> fast_path_fallback;  // fast paths that failed the start-up check (model/verify.h)
  int64_t host_reads = 0;      // times the loop read step results from the device (log, checkpoint, stop)
  int64_t nan_skipped = 0;     // updates skipped for a non-finite loss/gradient, whole run (train.nan_skip_limit)
  double step_s = 0;       // summed step time (zero_grad .. optimizer step) in this invocation
  double comm_wait_s = 0;  // of which blocked on the gradient all-reduce after backward (data parallel)
  int64_t buckets_synced = 0;        // gradient buckets all-reduced, summed over steps (data parallel)
  int64_t buckets_in_backward = 0;   // of which started from autograd hooks during backward (overlap)
  int64_t optimizer_bytes = 0;       // AdamW's moments this rank holds (ZeRO-1: about 1/world of them)
  int64_t master_bytes = 0;          // fp32 master weights this rank holds (distributed optimizer: ~1/world)
  int64_t weight_bytes = 0;          // the parameters' bytes (bf16 working weights: 2 a parameter)
  int64_t peak_device_bytes = 0;     // CUDA: the most bytes allocated at once (0 on a CPU)
  double plan_device_bytes = 0;      // what lmtrain plan counts for this run per GPU (bf16 on CUDA only)
  std::string summary() const;
  std::string mfu_text() const;  // "MFU 45.1% (median of 12 intervals; mfu_measured_peak 56.4%)"
};

// Validates the request, runs the start-up verification, trains, checkpoints: Trainer::create,
// then Trainer::train. Errors: bad config or run folder (exit 2), non-finite loss/gradient (names
// step and parameter).
absl::StatusOr<FitSummary> fit(const FitRequest& req, BatchSource& source, const ValSets& val);

// What one optimizer step did.
// The numbers are read from the device only when the loop reads its steps (read_steps: log,
// checkpoint and stop steps); until then `record` holds them and `read` is false.
struct StepResult {
  int64_t step = 0;      // 1-based optimizer step
  double loss = 0;       // mean training loss over the step's micro-batches (and ranks), nats/token
  double grad_norm = 0;  // global L2 norm of the gradient before clipping
  double lr = 0;
  bool applied = false;  // false: the loss or gradient was non-finite and the update was not applied
  bool read = false;     // loss, grad_norm, applied are set
  torch::Tensor record;  // on the device, float64 [3]: loss, grad norm, first non-finite gradient (-1 none)
  std::vector<int64_t> present;  // record's gradient index -> parameter index
  double seconds = 0;    // zero_grad .. optimizer step
  double comm_wait_s = 0;  // of which blocked on the gradient all-reduce after backward
  std::string skipped;     // not applied: the first non-finite parameter (set by the NaN handler)
  bool abandoned = false;  // a stop signal or a shrunk shard came between its micro-batches: dropped whole (stop_mid_step)
};

// The training loop as named parts (docs/architecture.md, "The training loop"). create() sets up
// a run (folder policy, model, optimizer, resume, start-up verification, gradient averaging);
// train() runs steps until the budget, a stop request or an error, calling in order:
// train_step, handle_non_finite, advance, measure + validate + write_metrics (on log steps),
// checkpoint_if_due, stop_policy. Every part is a member; the state they share is below, named.
class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const FitRequest& req, BatchSource& source,
                                                         const ValSets& val);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  absl::StatusOr<FitSummary> train();

  // One optimizer step on grad_accum micro-batches: forward, backward, gradient averaging across
  // ranks, clipping, and the AdamW update unless the loss or gradient is non-finite.
  StepResult train_step();

 private:
  enum class Stop { kNo, kAtStep, kSignal };
  using Clock = std::chrono::steady_clock;

  Trainer(const FitRequest& req, BatchSource& source, const ValSets& val);
  // Set-up, in create()'s order.
  absl::Status build_model();
  absl::Status keep_fast_paths_off();
  void choose_cuda_graphs();
  void choose_threads();
  absl::Status restore_or_start();
  absl::Status write_run_config() const;
  absl::Status startup_checks();
  absl::Status verify_fast_paths();
  void start_grad_sync();
  void announce();
  void announce_peaks() const;
  absl::Status open_metrics();
  // The step's pieces.
  struct DeviceStep {
    torch::Tensor record;          // loss, grad norm, first bad gradient (float64, on the device)
    std::vector<int64_t> present;  // the parameters that had a gradient
  };
  DeviceStep device_step(const std::function<torch::Tensor(int64_t)>& window, FaultInjector::Site fault,
                         StepResult& r);
  void graphed_step(StepResult& r);
  bool more_windows(int64_t micro) const;
  torch::Tensor accumulate_gradients(FaultInjector::Site fault, const std::function<torch::Tensor(int64_t)>& window);
  double sync_gradients(torch::Tensor& loss);
  GradNorm clip_gradients();
  int64_t bucket_bytes() const { return static_cast<int64_t>(tc_.distributed.bucket_mb * (1 << 20)); }
  void apply_update(const StepResult& r, const torch::Tensor& found_inf);
  model::NamedTensors optimizer_state() const;
  model::NamedTensors master_weights() const;
  double planned_device_bytes() const;
  void make_grad_sync(Comm* comm);
  absl::StatusOr<std::vector<bool>> sharded_master_params() const;
  torch::Tensor take_window(bool more);
  torch::Tensor fetch_window();
  Json data_cursor() const;
  // The loop's parts.
  absl::Status read_steps(bool logging_current);
  bool read_due() const;
  absl::Status handle_non_finite(StepResult& r, const std::string& culprit);
  void advance(const StepResult& r);
  bool log_due() const;
  Json step_line(const StepResult& r) const;
  Json measure(const StepResult& r);
  absl::Status append_line(const Json& line);
  void check_throughput(double rate);
  double mfu_of(double rate, double peak) const;
  void check_floor();
  void warn_floor();
  void lap(double* phase);
  void validate(Json& line);
  void write_samples();
  absl::Status write_metrics(const Json& line, const StepResult& r);
  void write_tensorboard(const Json& line);
  absl::Status checkpoint_if_due();
  absl::Status checkpoint(bool wait);
  absl::Status write_optimizer_shards(const std::string& parts_dir);
  Stop stop_policy();
  void announce_stop(Stop why);
  bool can_drop_step() const;
  bool drop_step_now();
  absl::Status stop_mid_step();
  absl::Status check_data_intact() const;
  FitSummary finish() const;
  Json trainer_state() const;

  FitRequest req_;
  const TrainConfig& tc_;  // req_.train, resolved
  BatchSource& source_;
  const ValSets& val_;
  const bool main_rank_;
  const std::string metrics_path_;
  torch::Device device_;
  bool bf16_ = false;
  model::Transformer model_{nullptr};
  std::vector<std::pair<std::string, torch::Tensor>> params_;  // named, registration order
  std::vector<torch::Tensor> plist_;                           // the same tensors, unnamed
  std::unique_ptr<AdamW> optim_;
  std::unique_ptr<GradSync> grad_sync_;
  std::unique_ptr<OptimizerShards> zero_;  // distributed.zero 1 with data parallel: this rank's shards
  // CUDA graphs (train.hardware.cuda_graphs, when usable here): the captured step, its window
  // buffers and its outputs. steps_this_start_ counts this invocation's steps (capture at 2).
  bool graphs_ = false;
  std::unique_ptr<StepGraph> graph_;
  std::vector<torch::Tensor> static_windows_;
  DeviceStep graph_out_;
  int64_t steps_this_start_ = 0;
  FaultInjector faults_;
  DevicePeak peak_;
  std::string threads_line_;  // choose_threads: the count and why, said in the device line
  int threads_ = 0;           // the intra-op thread count chosen (kept in trainer.json)
  StartupChecks checks_;      // what startup_checks found, said in one line (train/startup_log.h)
  double flops_per_token_ = 0;
  int64_t step_tokens_ = 0;
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0; dropped (one warning) if a write fails
  std::vector<SamplePrompt> sample_prompts_;        // rank 0, made at the first validation
  bool samples_announced_ = false;                  // their cost is logged once
  std::vector<int32_t> flat_;  // one micro-batch of token ids, reused
  torch::Tensor ahead_;        // the next micro-batch's windows, on the device (take_window)
  Json ahead_cursor_;          // the data cursor before ahead_ was fetched
  // A stop between micro-batches (can_drop_step): the step in flight is dropped, and the
  // data stream goes back to where it began.
  Json step_cursor_;
  int64_t micro_done_ = 0;     // micro-batches the step in flight finished
  bool abandoned_ = false;
  int mid_step_signal_ = 0;    // the signal the ranks agreed on before a micro-batch (any rank's)
  bool mid_step_fault_ = false;  // ... or a shard that shrank on some rank
  std::vector<StepResult> unread_;  // steps whose results are still only on the device
  StepResult last_;                 // the last step read

  // Progress: the counters a checkpoint stores, and this invocation's summary.
  int64_t step_ = 0, tokens_ = 0;
  int64_t nan_skipped_ = 0;  // updates skipped for a non-finite loss/gradient, whole run
  std::string restored_id_;  // checkpoint_identity of the checkpoint restored ("" for step 0)
  double last_loss_ = 0;     // of the last applied step
  FitSummary sum_;

  // Metrics over the current log interval, and the throughput sentinel.
  Clock::time_point t_start_, t_log_;
  int64_t tokens_at_log_ = 0;
  double interval_step_s_ = 0, interval_comm_s_ = 0;
  int64_t interval_steps_ = 0;
  std::vector<double> rates_;
  bool sentinel_warned_ = false;
  // MFU of each log interval of this invocation (both kinds), the first (warm-up) apart.
  std::vector<double> mfus_, mfus_measured_;
  double first_mfu_ = 0, first_mfu_measured_ = 0;
  int64_t lines_this_start_ = 0;
  // The throughput floor: fired once, then the next step is timed phase by phase (the host waits
  // for the device after each) and the warning names the split.
  bool floor_fired_ = false;
  struct StepSplit {
    bool on = false, done = false;
    int64_t step = 0;
    double forward = 0, backward = 0, optimizer = 0;
    Clock::time_point last;
  };
  StepSplit split_;
  std::unique_ptr<Progress> progress_;

  // Checkpoints: rank 0's background writer (train/checkpoint.h), and the wall-clock period.
  std::unique_ptr<CheckpointWriter> writer_;
  Clock::time_point last_checkpoint_;
  bool time_due_ = false;  // checkpoint_minutes passed, as all ranks agreed in stop_policy
};

// The resolved run config written to runs/NAME/config.json.
Json run_config_json(const FitRequest& req);

}  // namespace lm::train
