// Internal to lm_eval (evaluate.cpp, mc.cpp): the models one evaluation scores, and how a result
// is written. Not part of the library's interface (eval/evaluate.h is).
#pragma once

#include <string>

#include "core/config.h"
#include "eval/evaluate.h"
#include "eval/model_scorer.h"
#include "eval/run.h"

namespace lm::eval::internal {

struct Models {
  LoadedRun run;
  model::Transformer twin{nullptr};
  ScorerOptions scorer;
  std::string device, device_why;  // resolved --device (cpu | cuda) and how it was chosen
  std::string dtype, dtype_why;    // the dtype scored in (fp32 | bf16) and how it was chosen
};

// The model of o.run (a run folder or an HF folder) on the resolved device, with its twin when
// o.twin. `folder` (non-empty) loads that folder instead with o's device, dtype and batch size:
// the --compare model (latest checkpoint, no twin).
absl::StatusOr<Models> load_models(const RunOptions& o, const std::string& folder = "");

Scorer scorer_for(model::Transformer model, ScorerOptions so, const std::string& label);

// The fields every result starts with: the folder, checkpoint, step, seed, model, tokenizer, device.
Json run_header(const Models& m, const RunOptions& o);
// Header fields of the --compare model, for result["compare"].
Json compare_header(const Models& c);

// --out, else RUN/eval/<job>-....json and RUN/eval/<job>.json (the largest); an HF folder is never
// written into: without --out its result is only printed.
absl::Status write_result(const RunOptions& o, const std::string& job, Json j, const Json& config,
                          const std::string& size);

}  // namespace lm::eval::internal
