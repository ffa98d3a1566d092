// A training run folder as `lmtrain fit` writes it (layout: core/run_folder.h, docs/eval.md):
//   runs/NAME/config.json   {"model": ModelConfig, "train": {..., "seed": N}, ...}
//   runs/NAME/tokenizer/    spm.model + tokenizer.json
//   runs/NAME/checkpoints/step-00000100/model.safetensors (HF Llama names)
//   runs/NAME/latest        "step-00000100"
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "eval/model_scorer.h"  // make_twin
#include "model/config.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace lm::eval {

struct LoadedRun {
  std::string dir;
  std::string checkpoint;  // checkpoints/step-N folder
  int64_t step = 0;
  uint64_t seed = 0;       // train.seed: the twin's init seed
  model::ModelConfig config;
  model::Transformer model{nullptr};  // eval mode, CPU, fp32
  tokenizer::Tokenizer tokenizer;
};

// step < 0: the checkpoint `latest` names. Errors name the file and what to do.
absl::StatusOr<LoadedRun> load_run(const std::string& run_dir, int64_t step = -1);

// The thread count of an evaluation of `m` (on its device): `requested` > 0 (--threads) forces it;
// 0 times forwards of 1 x `tokens` (up to `repeats` per timing) at 1 thread and at all cores on a
// CPU and keeps the faster (runtime/threads.h). Logs the one line that says which.
void choose_threads(int requested, model::Transformer m, int64_t tokens, int repeats = 4);

}  // namespace lm::eval
