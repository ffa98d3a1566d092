// Checkpoints: runs/NAME/checkpoints/step-N/{model,optimizer}.safetensors + trainer.json (the
// layout: core/run_folder.h), written into step-N.tmp, fsynced, renamed; `latest` moved last;
// keep-last-K.
#pragma once

#include <string>

#include "core/config.h"
#include "model/transformer.h"
#include "train/optim.h"

namespace lm::train {

// Writes a checkpoint; a kill at any moment leaves the previous `latest` intact and loadable.
absl::Status save_checkpoint(const std::string& run_dir, int64_t step, model::Transformer& model,
                             const AdamW& optim, const Json& trainer_state, int64_t keep_last);

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
