#include "train/resume_point.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checkpoint_manifest.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/checkpoint_reader.h"
#include "model/safetensors.h"
#include "train/sharded_checkpoint.h"

namespace lm::train {
namespace fs = std::filesystem;

namespace {

// Every checkpoints/step-N folder (not a temp folder, not one set aside), newest first.
std::vector<int64_t> step_folders(const RunFolder& run) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run.checkpoints(), ec)) {
    auto step = RunFolder::parse_step_name(e.path().filename().string());
    if (step.ok() && e.is_directory()) steps.push_back(*step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Whether checkpoint `dir` of `step` can be resumed from: its files against the manifest, its
// trainer.json readable and of this step. One written before manifests existed is parsed whole
// instead (a truncated file fails there).
absl::Status check_candidate(const std::string& dir, int64_t step, bool* unverified, int* threads) {
  // optimizer.safetensors, or a ZeRO-1 checkpoint's index and every rank's file it names.
  if (has_optimizer_index(dir)) LM_RETURN_IF_ERROR(verify_checkpoint(dir, {kOptimizerIndex}, unverified));
  LM_ASSIGN_OR_RETURN(std::vector<std::string> files, optimizer_files(dir));
  files.insert(files.begin(), "model.safetensors");
  files.push_back("trainer.json");
  LM_RETURN_IF_ERROR(verify_checkpoint(dir, files, unverified));
  LM_ASSIGN_OR_RETURN(Json state, model::read_trainer_state(dir));
  if (!state["step"].is_number_integer() || state["step"].get<int64_t>() != step)
    return absl::DataLossError(absl::StrCat(dir, "/trainer.json: step ", state["step"].dump(),
                                            " but the folder is step ", step, " (edited or moved)"));
  *threads = state.value("threads", 0);
  if (*unverified) {
    for (const std::string& f : files) {
      if (f.size() < 12 || f.compare(f.size() - 12, 12, ".safetensors") != 0) continue;
      auto file = model::load_safetensors((fs::path(dir) / f).string());
      if (!file.ok()) return file.status();
    }
  }
  return absl::OkStatus();
}

std::string why(const absl::Status& st) { return std::string(st.message()); }

}  // namespace

absl::StatusOr<ResumePoint> choose_resume_point(const std::string& run_dir) {
  const RunFolder run(run_dir);
  ResumePoint p;
  auto latest = run.latest_name();
  if (latest.ok()) p.latest = *latest;
  const std::vector<int64_t> steps = step_folders(run);
  if (steps.empty() && p.latest.empty()) return p;  // killed before its first checkpoint
  for (int64_t step : steps) {
    const std::string dir = run.checkpoint(step);
    bool unverified = false;
    const absl::Status st = check_candidate(dir, step, &unverified, &p.threads);
    if (st.ok()) {
      p.checkpoint = dir;
      p.step = step;
      p.unverified = unverified;
      return p;
    }
    p.skipped.push_back(absl::StrCat(RunFolder::step_name(step), ": ", why(st)));
    p.skipped_steps.push_back(step);
  }
  std::string listed = p.skipped.empty() ? std::string("  checkpoints/ holds no step-N folder") : "  " + absl::StrJoin(p.skipped, "\n  ");
  if (!p.latest.empty()) listed += absl::StrCat("\n  (", run.latest(), " names ", p.latest, ")");
  return absl::DataLossError(absl::StrCat(
      run_dir, ": no checkpoint of this run verifies, so there is nothing to resume from (it is not restarted from "
      "step 0 over them; nothing was changed):\n", listed,
      "\nrestore a checkpoint from a copy, or start the run over with --force (deletes them)"));
}

absl::Status settle_resume_point(const std::string& run_dir, const ResumePoint& p) {
  const RunFolder run(run_dir);
  if (p.checkpoint.empty()) return absl::OkStatus();
  const std::string name = RunFolder::step_name(p.step);
  for (size_t i = 0; i < p.skipped.size(); ++i) {
    const std::string from = run.checkpoint(p.skipped_steps[i]);
    std::string to = from + ".damaged";
    for (int n = 2; fs::exists(to); ++n) to = absl::StrCat(from, ".damaged.", n);
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) return absl::InternalError(absl::StrCat("rename ", from, " to ", to, ": ", ec.message()));
    log_warn("resume: skipped %s; set aside as %s (nothing deleted)", p.skipped[i], fs::path(to).filename().string());
  }
  if (p.latest.empty())
    log_warn("resume: %s is missing; resuming from the newest checkpoint that verifies, %s (not from step 0)",
             run.latest(), name);
  else if (p.latest != name && p.skipped.empty())
    log_warn("resume: %s names %s, which is not there; resuming from the newest checkpoint that verifies, %s",
             run.latest(), p.latest, name);
  if (p.unverified)
    log_warn("resume: %s has no %s (written before checkpoint checksums): loaded unverified", p.checkpoint,
             kManifestName);
  if (p.latest != name) LM_RETURN_IF_ERROR(write_file_atomic(run.latest(), name + "\n"));
  return fsync_dir(run.checkpoints());
}

}  // namespace lm::train
