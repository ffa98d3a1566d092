// Resuming a run: its config.json is the truth. A resume compares what the flags (and --preset,
// --config) would set with the run's own config, field by field through the configs' visit():
// fields that define the run are refused, the budget (steps/tokens) re-plans the schedule, and
// per-invocation knobs (threads, device, logging, checkpoints, stop_at_step) may change freely.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "model/config.h"
#include "train/config.h"

namespace lm::train {

// How a field may change when a run is resumed.
enum class ResumeRule {
  kFixed,      // defines the run (model, optimizer, schedule shape, batch, seed, dtype): refused
  kReplan,     // the budget (train.steps, train.tokens): re-plans the schedule, said in the log
  kInvocation  // how this process runs it (threads, device, intervals, stop_at_step, faults): free
};
ResumeRule resume_rule(const std::string& dotted_field);

struct ConfigChange {
  std::string field;      // dotted: "train.lr", "model.d_model"
  Json run, now;          // the run's value and the requested one
  ResumeRule rule = ResumeRule::kFixed;
};

// Every field whose value differs between two JSON objects written by to_json() (so by the
// configs' visit()), recursing into nested objects, in the order of `run`'s keys.
std::vector<ConfigChange> config_changes(const Json& run, const Json& now, const std::string& prefix);

struct ResumePlan {
  TrainConfig train;                 // the config to continue with (resolved)
  std::vector<ConfigChange> changes; // everything that differs from the run's config
  std::vector<std::string> notes;    // what re-planning did, for the log
  bool finished = false;             // the run is at its last step: nothing to train
};

// Names what set a field in this invocation ("--lr", "--config run.json"), for messages.
using SourceOf = std::function<std::string(const std::string& dotted_field)>;

// `run_*`: the run's resolved config.json; `model`/`train`: what this invocation asks for
// (run's config < --preset < --config < flags). `done_step` is the latest checkpoint's step (0
// without one). Errors: FailedPrecondition listing each refused change (field, what set it, run
// value, new value), or a budget below the steps already done.
absl::StatusOr<ResumePlan> plan_resume(const model::ModelConfig& run_model, const TrainConfig& run_train,
                                       const model::ModelConfig& model, TrainConfig train, int64_t done_step,
                                       int world_size, const SourceOf& source_of);

// "train.lr (--lr): the run has 0.0003, now 0.001".
std::string describe(const ConfigChange& c, const SourceOf& source_of);

}  // namespace lm::train
