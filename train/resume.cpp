#include "train/resume.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lm::train {

ResumeRule resume_rule(const std::string& field) {
  if (field == "train.steps" || field == "train.tokens") return ResumeRule::kReplan;
  // How this process runs the steps, not which steps: the weights after step N do not depend on
  // them (device changes only rounding: moving a laptop run to a rented GPU is the point).
  // Whole sections: logging, eval, debug (verification, fault injection) and distributed (how the
  // gradients travel) never change which weights step N gives.
  for (const char* section : {"train.logging.", "train.eval.", "train.debug.", "train.distributed."})
    if (field.rfind(section, 0) == 0) return ResumeRule::kInvocation;
  static const std::set<std::string> kInvocation = {
      "train.stop_at_step", "train.nan_skip_limit", "train.hardware.threads", "train.hardware.device",
      "train.hardware.cuda_kernels",  // a kernel checked against its reference: rounding only
      "train.hardware.fast_paths_off",  // the same, the other way
      "train.hardware.cuda_graphs",     // the same kernels, launched by a replay
      "train.hardware.recompute",       // the same arithmetic, run again in backward: bit-identical
      "train.checkpoint.interval", "train.checkpoint.minutes", "train.checkpoint.keep_last",
      "train.checkpoint.at_end"};
  return kInvocation.count(field) ? ResumeRule::kInvocation : ResumeRule::kFixed;
}

std::vector<ConfigChange> config_changes(const Json& run, const Json& now, const std::string& prefix) {
  std::vector<ConfigChange> out;
  for (auto it = run.begin(); it != run.end(); ++it) {
    const std::string field = prefix.empty() ? it.key() : prefix + "." + it.key();
    const Json other = now.contains(it.key()) ? now[it.key()] : Json();
    if (it->is_object() && other.is_object()) {
      auto inner = config_changes(*it, other, field);
      out.insert(out.end(), inner.begin(), inner.end());
    } else if (*it != other) {
      out.push_back({field, *it, other, resume_rule(field)});
    }
  }
  return out;
}

std::string describe(const ConfigChange& c, const SourceOf& source_of) {
  const std::string by = source_of ? source_of(c.field) : std::string();
  return absl::StrCat(c.field, by.empty() ? "" : " (" + by + ")", ": the run has ", c.run.dump(), ", now ",
                      c.now.dump());
}

namespace {

// The budget changed: say how the learning rate continues (lr_at over the new total).
std::string replan_note(const TrainConfig& run, const TrainConfig& now, int64_t done) {
  std::string s = absl::StrFormat(
      "schedule re-planned: %d -> %d steps (%s); from step %d on, lr follows the %s schedule over %d steps",
      run.steps, now.steps, now.steps > run.steps ? "extended" : "shortened", done + 1, now.schedule.kind, now.steps);
  if (done < now.steps)
    s += absl::StrFormat(": lr at step %d is %.4g (the old plan had %.4g)", done + 1, lr_at(now, done),
                         done < run.steps ? lr_at(run, done) : lr_at(run, run.steps - 1));
  return s;
}

}  // namespace

absl::StatusOr<ResumePlan> plan_resume(const model::ModelConfig& run_model, const TrainConfig& run_train,
                                       const model::ModelConfig& model, TrainConfig train, int64_t done_step,
                                       int world_size, const SourceOf& source_of) {
  LM_RETURN_IF_ERROR(resolve(train, model, world_size));
  ResumePlan plan;
  plan.changes = config_changes(to_json(run_model), to_json(model), "model");
  auto tc = config_changes(to_json(run_train), to_json(train), "train");
  plan.changes.insert(plan.changes.end(), tc.begin(), tc.end());
  std::vector<std::string> refused;
  for (const auto& c : plan.changes)
    if (c.rule == ResumeRule::kFixed) refused.push_back("  " + describe(c, source_of));
  if (!refused.empty())
    return absl::FailedPreconditionError(absl::StrCat(
        "--resume continues the run with its own config.json, and these would change it:\n",
        absl::StrJoin(refused, "\n"),
        "\ndrop them to continue the run as it was, or start a new run (another --out, or --init-from its export)"));
  if (train.steps < done_step)
    return absl::FailedPreconditionError(absl::StrFormat(
        "train.steps %d is fewer than the %d steps the run has already done; pass --steps >= %d (or "
        "leave --steps/--tokens out to keep the run's %d)",
        train.steps, done_step, done_step, run_train.steps));
  if (train.steps != run_train.steps) plan.notes.push_back(replan_note(run_train, train, done_step));
  plan.finished = done_step == train.steps;
  plan.train = std::move(train);
  return plan;
}

}  // namespace lm::train
