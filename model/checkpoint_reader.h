// Reading a run's checkpoints (runs/NAME/checkpoints/step-N/, the layout: core/run_folder.h):
// the folder of a step or of `latest`, trainer.json, the model weights, and a whole trained model
// for export. Lives beside the model, not in lm_train, so that lmeval (sample, nll, mc) and the
// exports read checkpoints without linking the training library; the writer is train/checkpoint.h.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "model/config.h"
#include "model/transformer.h"

namespace lm::model {

// The folder `latest` points to, or NotFound.
absl::StatusOr<std::string> latest_checkpoint(const std::string& run_dir);
// The folder of `step` (or latest when step < 0), checked to hold all three files.
absl::StatusOr<std::string> find_checkpoint(const std::string& run_dir, int64_t step);

// Checks `files` of a checkpoint against its manifest (core/checkpoint_manifest.h) before a
// reader (lmeval, export) loads them: DataLoss naming the file, and --step to read another; a
// checkpoint from before checksums is read with a warning.
absl::Status verify_checkpoint_read(const std::string& ckpt_dir, const std::vector<std::string>& files);

// Reads trainer.json and validates that all files are present and readable.
absl::StatusOr<Json> read_trainer_state(const std::string& ckpt_dir);
absl::Status load_model(const std::string& ckpt_dir, Transformer& model);

// A trained model as an exporter needs it: the run's config.json (its "model" section), the
// checkpoint of `step` (latest when < 0), its trainer.json, and the weights loaded.
struct TrainedModel {
  Json run_config;
  ModelConfig config;
  std::string checkpoint;
  Json trainer;
  Transformer model{nullptr};
};
// Also checks the run's tokenizer copy against config.json (RunFolder::check_tokenizer).
absl::StatusOr<TrainedModel> load_trained_model(const std::string& run_dir, int64_t step);

// An export never writes over something by accident: an existing file, or (`folder`) a non-empty
// folder, is AlreadyExists saying what is there, unless `force`. An empty folder is fine.
absl::Status check_export_target(const std::string& out, bool folder, bool force);

}  // namespace lm::model
