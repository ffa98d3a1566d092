#include "eval/run.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/checkpoint_reader.h"
#include "model/hf_import.h"
#include "model/safetensors.h"
#include "runtime/threads.h"
#include "tokenizer/import_hf.h"

namespace lm::eval {
namespace fs = std::filesystem;

absl::StatusOr<LoadedRun> load_run(const std::string& run_dir, int64_t step) {
  LoadedRun run;
  run.dir = run_dir;
  const RunFolder folder(run_dir);
  const std::string cfg_path = folder.config();
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

  std::string name = RunFolder::step_name(step);
  if (step >= 0) LM_RETURN_IF_ERROR(folder.check_step(step, "--step"));
  if (step < 0) {
    auto latest = folder.latest_name();
    if (!latest.ok())
      return absl::NotFoundError(absl::StrCat(folder.latest(), ": not found; the run has no checkpoint yet (or pass --step)"));
    name = *latest;
  }
  run.checkpoint = folder.checkpoint(name);
  const std::string weights = run.checkpoint + "/model.safetensors";
  LM_RETURN_IF_ERROR(model::verify_checkpoint_read(run.checkpoint, {"model.safetensors"}));  // there, and its checksum
  if (!fs::exists(weights)) return absl::NotFoundError(absl::StrCat("not found, expected ", weights));
  auto parsed = RunFolder::parse_step_name(name);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(run.checkpoint, ": folder name is not step-<N>"));
  run.step = *parsed;

  run.model = model::Transformer(run.config);
  LM_ASSIGN_OR_RETURN(auto file, model::load_safetensors(weights));
  // bf16 exports load into the fp32 module.
  LM_RETURN_IF_ERROR(model::load_module_state(*run.model, file, weights, /*allow_dtype_cast=*/true));
  run.model->eval();

  LM_RETURN_IF_ERROR(folder.check_tokenizer());  // the copy is the one the run trained with
  LM_ASSIGN_OR_RETURN(run.tokenizer, tokenizer::Tokenizer::load(folder.tokenizer()));
  if (run.tokenizer.vocab_size() > run.config.vocab_size)
    return absl::FailedPreconditionError(absl::StrCat(
        run_dir, "/tokenizer: vocabulary ", run.tokenizer.vocab_size(), " is larger than the model's vocab_size ",
        run.config.vocab_size, " in ", cfg_path, " (the run folder mixes two tokenizers)"));
  return run;
}

bool is_hf_folder(const std::string& dir) {
  if (!model::is_hf_checkpoint(dir)) return false;
  auto j = read_json_file((fs::path(dir) / "config.json").string());
  if (!j.ok() || !j->is_object() || j->contains("model")) return false;
  return j->contains("model_type") || j->contains("architectures");
}

namespace {

// The folder's own tokenizer, read as 'lmtrain tokenizer --import' reads it (into a scratch
// folder that is removed again: the HF folder is never written).
absl::StatusOr<tokenizer::Tokenizer> hf_folder_tokenizer(const std::string& dir) {
  std::string scratch = (fs::temp_directory_path() / "lmeval-tok.XXXXXX").string();
  if (::mkdtemp(scratch.data()) == nullptr)
    return absl::InternalError(absl::StrCat(scratch, ": cannot create a scratch folder for the tokenizer"));
  tokenizer::ImportOptions io;
  io.hf_dir = dir;
  io.out = scratch + "/tok";
  auto tok = tokenizer::import_hf_tokenizer(io);
  std::error_code ec;
  fs::remove_all(scratch, ec);
  if (!tok.ok()) return annotate(tok.status(), absl::StrCat(dir, ": the checkpoint's tokenizer"));
  return tok;
}

}  // namespace

absl::StatusOr<LoadedRun> load_hf_folder(const std::string& dir, uint64_t seed) {
  LoadedRun run;
  run.kind = "hf";
  run.dir = dir;
  run.checkpoint = dir;
  run.step = 0;
  run.seed = seed;
  LM_ASSIGN_OR_RETURN(run.config, model::read_hf_config(dir));
  LM_ASSIGN_OR_RETURN(run.tokenizer, hf_folder_tokenizer(dir));
  LM_ASSIGN_OR_RETURN(run.model, model::import_hf(dir));
  run.config = run.model->config();
  run.model->eval();
  return run;
}

absl::StatusOr<LoadedRun> load_model_folder(const std::string& dir, int64_t step, uint64_t seed) {
  if (!is_hf_folder(dir)) return load_run(dir, step);
  if (step >= 0)
    return absl::InvalidArgumentError(absl::StrCat("--step ", step, ": ", dir,
                                                   " is an HF checkpoint folder (one set of weights); drop --step"));
  return load_hf_folder(dir, seed);
}

void choose_threads(int requested, model::Transformer m, int64_t tokens, int repeats) {
  const bool on_cpu = m->parameters().front().device().is_cpu();
  const int64_t t = std::min(tokens, m->config().max_seq_len);
  const ThreadChoice c = set_threads_for(requested, on_cpu, model::forward_probe(m, 1, t, repeats),
                                         absl::StrFormat("forward 1 x %d token%s", t, t == 1 ? "" : "s"));
  log_info("%s", c.line);
}

}  // namespace lm::eval
