// Checkpoints: runs/NAME/checkpoints/step-N/{model,optimizer}.safetensors + trainer.json (the
// layout: core/run_folder.h), written into step-N.tmp, fsynced, renamed; `latest` moved last;
// keep-last-K.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "core/config.h"
#include "model/transformer.h"
#include "train/optim.h"

namespace lm::train {

// Writes a checkpoint; a kill at any moment leaves the previous `latest` intact and loadable.
absl::Status save_checkpoint(const std::string& run_dir, int64_t step, model::Transformer& model,
                             const AdamW& optim, const Json& trainer_state, int64_t keep_last);

// The state of one step, taken off the training tensors: CPU copies of the weights and AdamW's
// moments and the trainer state. Training may change the originals while a writer saves this.
struct CheckpointSnapshot {
  int64_t step = 0;
  model::NamedTensors model, optimizer;
  Json trainer_state;
};
// `copy` false shares the CPU tensors instead (a synchronous write, nothing changes meanwhile).
CheckpointSnapshot snapshot_checkpoint(int64_t step, model::Transformer& model, const AdamW& optim,
                                       const Json& trainer_state, bool copy = true);
// save_checkpoint's writer: step-N.tmp, fsync, rename, `latest` last, keep-last-K.
absl::Status write_checkpoint(const std::string& run_dir, const CheckpointSnapshot& snap, int64_t keep_last);

// Writes checkpoints in one background thread, off the training step: start() hands over a
// snapshot and returns; never two writes at once (start waits for the one in flight). A write's
// error comes back from the next start() or wait(). A kill mid-write leaves the previous
// `latest` loadable (the same tmp/rename protocol as save_checkpoint).
class CheckpointWriter {
 public:
  CheckpointWriter(std::string run_dir, int64_t keep_last);
  ~CheckpointWriter();  // waits for the write in flight
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the previous write; returns its error (the new one is then not started).
  absl::Status start(CheckpointSnapshot snap);
  // Waits for the write in flight (if any) and returns its status.
  absl::Status wait();
  bool busy() const;
  // Seconds the last finished write took (snapshot to `latest`), for the log.
  double last_write_s() const;

 private:
  const std::string run_dir_;
  const int64_t keep_last_;
  std::thread thread_;
  mutable std::mutex mu_;
  bool busy_ = false;
  absl::Status status_;
  double last_write_s_ = 0;
};

// The folder `latest` points to, or NotFound.
absl::StatusOr<std::string> latest_checkpoint(const std::string& run_dir);
// The folder of `step` (or latest when step < 0), checked to hold all three files.
absl::StatusOr<std::string> find_checkpoint(const std::string& run_dir, int64_t step);

// Reads trainer.json and validates that all files are present and readable.
absl::StatusOr<Json> read_trainer_state(const std::string& ckpt_dir);
absl::Status load_model(const std::string& ckpt_dir, model::Transformer& model);
absl::Status load_optimizer(const std::string& ckpt_dir, AdamW& optim);

// A trained model as an exporter needs it: the run's config.json (its "model" section), the
// checkpoint of `step` (latest when < 0), its trainer.json, and the weights loaded.
struct TrainedModel {
  Json run_config;
  model::ModelConfig config;
  std::string checkpoint;
  Json trainer;
  model::Transformer model{nullptr};
};
absl::StatusOr<TrainedModel> load_trained_model(const std::string& run_dir, int64_t step);

// CPU generator state as hex, and back.
std::string cpu_rng_state();
absl::Status set_cpu_rng_state(const std::string& hex);

}  // namespace lm::train
