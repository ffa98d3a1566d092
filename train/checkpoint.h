// Checkpoints: runs/NAME/checkpoints/step-N/{model,optimizer}.safetensors + trainer.json (the
// layout: core/run_folder.h), written into step-N.tmp, fsynced, renamed; `latest` moved last;
// keep-last-K. This is the writer (and the optimizer/RNG state); reading is model/checkpoint_reader.h.
#pragma once

#include <string>

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

absl::Status load_optimizer(const std::string& ckpt_dir, AdamW& optim);

// CPU generator state as hex, and back.
std::string cpu_rng_state();
absl::Status set_cpu_rng_state(const std::string& hex);

}  // namespace lm::train
