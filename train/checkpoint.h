// Checkpoints: runs/NAME/checkpoints/step-N/{model,optimizer}.safetensors + trainer.json (the
// layout: core/run_folder.h), written into step-N.tmp, fsynced, renamed; `latest` moved last;
// keep-last-K. This is the writer (and the optimizer/RNG state); reading is model/checkpoint_reader.h.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "core/config.h"
#include "model/checkpoint_reader.h"
#include "model/transformer.h"
#include "train/optim.h"

namespace lm::train {

// Writes a checkpoint; a kill at any moment leaves the previous `latest` intact and loadable.
absl::Status save_checkpoint(const std::string& run_dir, int64_t step, model::Transformer& model,
                             const AdamW& optim, const Json& trainer_state, int64_t keep_last);

// Checkpoint reading (find_checkpoint, load_model, load_trained_model, ...) is
// model/checkpoint_reader.h, so that evaluation and export read checkpoints without lm_train.
using model::find_checkpoint;
using model::latest_checkpoint;
using model::load_model;
using model::load_trained_model;
using model::read_trainer_state;
using model::TrainedModel;

// The state of one step, taken off the training tensors: CPU copies of the weights and AdamW's
// moments and the trainer state. Training may change the originals while a writer saves this.
struct CheckpointSnapshot {
  int64_t step = 0;
  model::NamedTensors model, optimizer;
  Json trainer_state;
  // ZeRO-1 (train/sharded_checkpoint.h): `optimizer` is empty and the optimizer is the `world`
  // ranks' files in `optimizer_parts` (checkpoints/step-N.parts), with AdamW's step counts.
  std::string optimizer_parts;
  int world = 1;
  Json optimizer_steps;
};
// `copy` false shares the CPU tensors instead (a synchronous write, nothing changes meanwhile).
CheckpointSnapshot snapshot_checkpoint(int64_t step, model::Transformer& model, const AdamW& optim,
                                       const Json& trainer_state, bool copy = true);
// The same with the optimizer's state given (ZeRO-1: every rank's moments gathered), and
// `fp32_weights` saved in place of the parameters of those names (the distributed optimizer's
// masters of its bf16 working weights: a checkpoint's weights stay fp32).
CheckpointSnapshot snapshot_checkpoint(int64_t step, model::Transformer& model, const model::NamedTensors& optimizer,
                                       const Json& trainer_state, const model::NamedTensors& fp32_weights = {},
                                       bool copy = true);
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


// optimizer.safetensors, or (a ZeRO-1 checkpoint) this process's elements of the ranks' files.
absl::Status load_optimizer(const std::string& ckpt_dir, AdamW& optim);

// CPU generator state as hex, and back.
std::string cpu_rng_state();
absl::Status set_cpu_rng_state(const std::string& hex);

}  // namespace lm::train
