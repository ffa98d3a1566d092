#include "model/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checkpoint_manifest.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/safetensors.h"

namespace lm::model {
namespace fs = std::filesystem;

absl::StatusOr<std::string> latest_checkpoint(const std::string& run_dir) {
  const RunFolder run(run_dir);
  LM_ASSIGN_OR_RETURN(std::string name, run.latest_name());
  return run.checkpoint(name);
}

absl::StatusOr<std::string> find_checkpoint(const std::string& run_dir, int64_t step) {
  std::string dir;
  if (step < 0) {
    LM_ASSIGN_OR_RETURN(dir, latest_checkpoint(run_dir));
  } else {
    LM_RETURN_IF_ERROR(RunFolder(run_dir).check_step(step, "--step"));
    dir = RunFolder(run_dir).checkpoint(step);
  }
  // A ZeRO-1 checkpoint holds optimizer.index.json and the ranks' files instead of optimizer.safetensors.
  const bool sharded = fs::exists(fs::path(dir) / "optimizer.index.json");
  for (const char* f : {"model.safetensors", sharded ? "optimizer.index.json" : "optimizer.safetensors", "trainer.json"}) {
    if (!fs::exists(fs::path(dir) / f))
      return absl::NotFoundError(absl::StrCat(dir, ": checkpoint is missing ", f,
                                              " (incomplete or damaged; read another checkpoint with --step N)"));
  }
  return dir;
}

absl::Status verify_checkpoint_read(const std::string& ckpt_dir, const std::vector<std::string>& files) {
  bool unverified = false;
  absl::Status st = verify_checkpoint(ckpt_dir, files, &unverified);
  if (!st.ok())
    return absl::Status(st.code(), absl::StrCat(st.message(), "; read another checkpoint with --step N"));
  if (unverified)
    log_warn("%s: no %s (written before checkpoint checksums): read unverified", ckpt_dir, kManifestName);
  return absl::OkStatus();
}

absl::StatusOr<Json> read_trainer_state(const std::string& ckpt_dir) {
  LM_ASSIGN_OR_RETURN(Json j, read_json_file((fs::path(ckpt_dir) / "trainer.json").string()));
  for (const char* key : {"step", "tokens", "data_cursor", "config", "tokenizer_hash", "world_size"}) {
    if (!j.contains(key))
      return absl::DataLossError(absl::StrCat(ckpt_dir, "/trainer.json: field '", key, "' is missing"));
  }
  return j;
}

absl::Status load_model(const std::string& ckpt_dir, Transformer& model) {
  const std::string path = (fs::path(ckpt_dir) / "model.safetensors").string();
  LM_ASSIGN_OR_RETURN(auto f, load_safetensors(path));
  return load_module_state(*model, f, path);
}

absl::StatusOr<TrainedModel> load_trained_model(const std::string& run_dir, int64_t step) {
  const RunFolder run(run_dir);
  TrainedModel t;
  LM_ASSIGN_OR_RETURN(t.run_config, read_json_file(run.config()));
  if (!t.run_config.contains("model"))
    return absl::DataLossError(run.config() + ": field 'model' is missing (not a run folder written by 'lmtrain fit'?)");
  LM_RETURN_IF_ERROR(from_json(t.run_config["model"], t.config, "model"));
  LM_RETURN_IF_ERROR(run.check_tokenizer());  // what sample prints and an export ships with the weights
  LM_ASSIGN_OR_RETURN(t.checkpoint, find_checkpoint(run_dir, step));
  LM_RETURN_IF_ERROR(verify_checkpoint_read(t.checkpoint, {"model.safetensors", "trainer.json"}));
  LM_ASSIGN_OR_RETURN(t.trainer, read_trainer_state(t.checkpoint));
  t.model = Transformer(t.config);
  LM_RETURN_IF_ERROR(load_model(t.checkpoint, t.model));
  return t;
}

absl::Status check_export_target(const std::string& out, bool folder, bool force) {
  std::error_code ec;
  if (force || !fs::exists(out, ec)) return absl::OkStatus();
  if (folder && fs::is_directory(out, ec)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(out, ec)) names.push_back(e.path().filename().string());
    if (names.empty()) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrCat(out, ": not empty (holds ", name_list(std::move(names)),
                                                 "); pass --force to write over it, or pick another --out"));
  }
  const std::string what = fs::is_directory(out, ec) ? "a folder"
                                                     : absl::StrCat("a file of ", fs::file_size(out, ec), " bytes");
  return absl::AlreadyExistsError(
      absl::StrCat(out, ": already exists (", what, "); pass --force to write over it, or pick another --out"));
}

}  // namespace lm::model
