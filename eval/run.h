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
  std::string kind = "run";  // "run": a folder of 'lmtrain fit'; "hf": an HF checkpoint folder
};

// step < 0: the checkpoint `latest` names. Errors name the file and what to do.
absl::StatusOr<LoadedRun> load_run(const std::string& run_dir, int64_t step = -1);

// True when `dir`'s config.json is an HF checkpoint's (model_type / architectures at the top, no
// "model" object as a run folder's config.json has).
bool is_hf_folder(const std::string& dir);

// An HF checkpoint folder (LlamaForCausalLM, Qwen2ForCausalLM: model/hf_import.h) with its own
// tokenizer (tokenizer.json or tokenizer.model, read as 'lmtrain tokenizer --import' reads it):
// step 0, `seed` the random twin's init seed (the folder records none), checkpoint = the folder.
absl::StatusOr<LoadedRun> load_hf_folder(const std::string& dir, uint64_t seed);

// A run folder or an HF folder, whichever `dir` is; `step` >= 0 is refused for an HF folder.
// `seed`: the twin's seed for an HF folder (a run folder's is its train.seed).
absl::StatusOr<LoadedRun> load_model_folder(const std::string& dir, int64_t step, uint64_t seed);

// The thread count of an evaluation of `m` (on its device): `requested` > 0 (--threads) forces it;
// 0 times forwards of 1 x `tokens` (up to `repeats` per timing) at 1 thread and at all cores on a
// CPU and keeps the faster (runtime/threads.h). Logs the one line that says which.
void choose_threads(int requested, model::Transformer m, int64_t tokens, int repeats = 4);

}  // namespace lm::eval
