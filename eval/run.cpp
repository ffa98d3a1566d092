#include "eval/run.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/config.h"
#include "core/file.h"
#include "model/safetensors.h"

namespace lm::eval {
namespace fs = std::filesystem;

std::string step_folder(int64_t step) { return absl::StrFormat("step-%08d", step); }

absl::StatusOr<LoadedRun> load_run(const std::string& run_dir, int64_t step) {
  LoadedRun run;
  run.dir = run_dir;
  const std::string cfg_path = run_dir + "/config.json";
  if (!fs::exists(cfg_path))
    return absl::NotFoundError(absl::StrCat(cfg_path, ": not found (is ", run_dir,
                                            " a run folder written by 'lmtrain fit'?)"));
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(cfg_path));
  if (!j.is_object() || !j.contains("model"))
    return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": no \"model\" object"));
  // Only model and train.seed matter here; other top-level keys belong to the trainer.
  LM_RETURN_IF_ERROR(annotate(from_json(j["model"], run.config, "model"), cfg_path));
  LM_RETURN_IF_ERROR(annotate(model::validate(run.config), cfg_path));
  if (j.contains("train") && j["train"].contains("seed")) {
    const Json& s = j["train"]["seed"];
    if (!s.is_number_integer())
      return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": train.seed: expected an integer, got ", s.dump()));
    run.seed = s.get<uint64_t>();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": train.seed missing (the twin needs the run's init seed)"));
  }

  std::string name;
  if (step >= 0) {
    name = step_folder(step);
  } else {
    const std::string latest = run_dir + "/latest";
    auto text = read_file(latest);
    if (!text.ok())
      return absl::NotFoundError(absl::StrCat(latest, ": not found; the run has no checkpoint yet (or pass --step)"));
    name = std::string(absl::StripAsciiWhitespace(*text));
  }
  run.checkpoint = run_dir + "/checkpoints/" + name;
  const std::string weights = run.checkpoint + "/model.safetensors";
  if (!fs::exists(weights)) return absl::NotFoundError(absl::StrCat("not found, expected ", weights));
  absl::string_view digits = name;
  if (!absl::ConsumePrefix(&digits, "step-") || !absl::SimpleAtoi(digits, &run.step))
    return absl::InvalidArgumentError(absl::StrCat(run.checkpoint, ": folder name is not step-<N>"));

  run.model = model::Transformer(run.config);
  LM_ASSIGN_OR_RETURN(auto file, model::load_safetensors(weights));
  // bf16 exports load into the fp32 module.
  LM_RETURN_IF_ERROR(model::load_module_state(*run.model, file, weights, /*allow_dtype_cast=*/true));
  run.model->eval();

  LM_ASSIGN_OR_RETURN(run.tokenizer, tokenizer::Tokenizer::load(run_dir + "/tokenizer"));
  if (run.tokenizer.vocab_size() > run.config.vocab_size)
    return absl::FailedPreconditionError(absl::StrCat(
        run_dir, "/tokenizer: vocabulary ", run.tokenizer.vocab_size(), " is larger than the model's vocab_size ",
        run.config.vocab_size, " in ", cfg_path, " (the run folder mixes two tokenizers)"));
  return run;
}


}  // namespace lm::eval
