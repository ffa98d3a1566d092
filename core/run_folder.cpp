#include "core/run_folder.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/file.h"
#include "core/run_lock.h"

namespace lm {
namespace fs = std::filesystem;

std::string RunFolder::path(std::string_view name) const { return (fs::path(dir_) / name).string(); }

std::string RunFolder::checkpoint(std::string_view name) const {
  return (fs::path(dir_) / "checkpoints" / name).string();
}

bool RunFolder::exists() const { return fs::exists(config()); }

std::string RunFolder::step_name(int64_t step) { return absl::StrFormat("step-%08d", step); }

absl::StatusOr<int64_t> RunFolder::parse_step_name(std::string_view name) {
  absl::string_view digits(name.data(), name.size());
  int64_t step = 0;
  if (!absl::ConsumePrefix(&digits, "step-") || !absl::SimpleAtoi(digits, &step))
    return absl::InvalidArgumentError(std::string(name) + ": folder name is not step-<N>");
  return step;
}

absl::Status RunFolder::check_policy(bool resume, bool force) const {
  const bool there = exists();
  if (there && !resume && !force) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir_, ": a run already exists here (continue it with --resume, or pass --force to start over)"));
  }
  if (resume && !there)
    return absl::NotFoundError(dir_ + ": no run to resume (no config.json); start it without --resume, or use "
                                      "--resume auto, which starts it when there is none");
  return absl::OkStatus();
}

RunFolder::Contents RunFolder::contents() const {
  Contents c;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) {
    if (fs::exists(dir_, ec)) c = {Holds::kOther, {dir_ + " (a file, not a folder)"}};
    return c;
  }
  if (exists()) return {Holds::kRun, {}};
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    // What a start writes before config.json: the tokenizer copy, and config.json's temp file.
    // And the lock file (core/run_lock.h), which a kill leaves behind.
    if ((name == "tokenizer" && e.is_directory()) || name.rfind("config.json.tmp.", 0) == 0 || name == kRunLockName)
      continue;
    c.other.push_back(name + (e.is_directory() ? "/" : ""));
  }
  std::sort(c.other.begin(), c.other.end());
  if (!c.other.empty()) c.holds = Holds::kOther;
  return c;
}

std::vector<int64_t> RunFolder::checkpoint_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints(), ec)) {
    auto step = parse_step_name(e.path().filename().string());
    if (step.ok() && fs::exists(e.path() / "model.safetensors") && fs::exists(e.path() / "trainer.json"))
      steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status RunFolder::check_step(int64_t step, std::string_view flag) const {
  if (fs::exists(checkpoint(step))) return absl::OkStatus();
  const std::vector<int64_t> steps = checkpoint_steps();
  std::string have = steps.empty() ? "none" : "";
  for (size_t i = 0; i < steps.size(); ++i) absl::StrAppend(&have, i ? ", " : "", steps[i]);
  return absl::NotFoundError(absl::StrCat(checkpoint(step), ": no checkpoint at step ", step, "; the run has: ", have,
                                          " (checkpoint.keep_last keeps the newest; pick one with ", std::string(flag), ")"));
}

absl::StatusOr<std::string> RunFolder::tokenizer_model_file(const std::string& tok_dir) {
  LM_ASSIGN_OR_RETURN(Json meta, read_json_file((fs::path(tok_dir) / "tokenizer.json").string()));
  return meta.is_object() ? meta.value("model_file", "spm.model") : "spm.model";
}

absl::Status RunFolder::check_tokenizer() const {
  LM_ASSIGN_OR_RETURN(Json cfg, read_json_file(config()));
  if (!cfg.is_object() || !cfg.contains("tokenizer_hash") || !cfg["tokenizer_hash"].is_string() ||
      cfg["tokenizer_hash"].get<std::string>().empty())
    return absl::OkStatus();
  // The model file tokenizer.json names (an imported tokenizer's is not spm.model).
  const auto model = tokenizer_model_file(tokenizer());
  const std::string spm = path("tokenizer/" + (model.ok() ? *model : std::string("spm.model")));
  LM_ASSIGN_OR_RETURN(std::string bytes, read_file(spm));
  const std::string want = cfg["tokenizer_hash"].get<std::string>(), have = hex64(fnv1a64(bytes.data(), bytes.size()));
  if (have == want) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      spm, ": tokenizer hash ", have, " but ", config(), " records ", want,
      " (the run was trained with another tokenizer; copy that one back into ", tokenizer(),
      "/, or use the run folder as 'lmtrain fit' wrote it)"));
}

absl::Status RunFolder::open(bool resume, bool force) const {
  LM_RETURN_IF_ERROR(check_policy(resume, force));
  std::error_code ec;
  if (force && !resume) {
    LM_RETURN_IF_ERROR(remove_tree(checkpoints()));
    fs::remove(latest(), ec);
    fs::remove(metrics(), ec);
    fs::remove(samples(), ec);
    LM_RETURN_IF_ERROR(remove_tree(tensorboard()));
  }
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir_, ": cannot create: ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> RunFolder::latest_name() const {
  if (!fs::exists(latest()))
    return absl::NotFoundError(latest() + ": no checkpoint yet (the run never saved one)");
  LM_ASSIGN_OR_RETURN(std::string name, read_file(latest()));
  return std::string(absl::StripAsciiWhitespace(name));
}

absl::StatusOr<std::vector<Json>> read_metrics(const std::string& path) {
  std::vector<Json> rows;
  if (!fs::exists(path)) return rows;
  LM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      rows.push_back(Json::parse(line));
    } catch (...) {
      break;  // a torn last line from a kill
    }
  }
  return rows;
}

}  // namespace lm
