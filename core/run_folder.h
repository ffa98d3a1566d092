// The run folder, the one owner of its layout and of the create/resume/force policy; training,
// evaluation, export, report and the commands ask it for paths instead of spelling them.
//   config.json    the resolved {"model", "train", "data", "tokenizer_hash", "world_size"}
//   tokenizer/     spm.model + tokenizer.json (a run is self-contained)
//   metrics.jsonl  one JSON object per logged step
//   samples.jsonl  text the model wrote at each validation step (train.sample_tokens)
//   tensorboard/   the same values as TensorBoard event files (one file per start or resume)
//   checkpoints/step-00000100/  model.safetensors, optimizer.safetensors, trainer.json, and
//                  manifest.json (each file's size and CRC-32, written last: core/checkpoint_manifest.h)
//   checkpoints/step-00000120.damaged/  a checkpoint that failed its checks, set aside by a resume
//   run.lock       held (flock) by the one process writing the run (core/run_lock.h)
//   latest         the name of the newest complete checkpoint ("step-00000100"), moved last
//   eval/          nll-*.json, mc-*.json per configuration; nll.json, mc.json the largest
//   plots/, report.html
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace lm {

class RunFolder {
 public:
  explicit RunFolder(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string config() const { return path("config.json"); }
  std::string tokenizer() const { return path("tokenizer"); }
  std::string metrics() const { return path("metrics.jsonl"); }
  std::string samples() const { return path("samples.jsonl"); }  // text samples at validation steps
  std::string tensorboard() const { return path("tensorboard"); }  // event files of metrics.jsonl's values
  std::string checkpoints() const { return path("checkpoints"); }
  std::string checkpoint(int64_t step) const { return checkpoint(step_name(step)); }
  std::string checkpoint(std::string_view name) const;  // checkpoints/NAME
  std::string latest() const { return path("latest"); }
  std::string eval() const { return path("eval"); }
  std::string plots() const { return path("plots"); }
  std::string report() const { return path("report.html"); }

  // A run is there when its config.json is.
  bool exists() const;

  // "step-00000100", and back (InvalidArgument naming the folder otherwise).
  static std::string step_name(int64_t step);
  static absl::StatusOr<int64_t> parse_step_name(std::string_view name);

  // Never overwrite a run by accident: an existing run needs `resume` or `force`; `resume` needs
  // a run. Errors name the folder and the flag to use.
  absl::Status check_policy(bool resume, bool force) const;

  // What the folder holds, for `fit --resume auto` (start when there is no run yet, continue when
  // there is, refuse anything else). A start writes the tokenizer copy, then config.json
  // (atomically: a temp file renamed), so a folder killed before config.json was renamed holds
  // at most tokenizer/ and config.json.tmp.* and is "no run yet".
  enum class Holds { kNothing, kRun, kOther };
  struct Contents {
    Holds holds = Holds::kNothing;
    std::vector<std::string> other;  // kOther: the entries that are no part of a run's start
  };
  Contents contents() const;

  // Checkpoint steps present (complete: model.safetensors and trainer.json there), ascending.
  std::vector<int64_t> checkpoint_steps() const;
  // NotFound when checkpoints/step-N is not there, listing the steps that are (keep_last prunes
  // older ones); `flag` is what picks another ("--step").
  absl::Status check_step(int64_t step, std::string_view flag) const;

  // The tokenizer copy (tokenizer/spm.model) is the one config.json records (tokenizer_hash, the
  // fnv1a64 of spm.model = tokenizer::model_hash): another tokenizer copied in would turn every
  // text the model reads or writes into garbage. FailedPrecondition naming both hashes and files;
  // ok when config.json records none (or an empty one).
  absl::Status check_tokenizer() const;
  // The model file a tokenizer folder's tokenizer.json names ("model_file": spm.model for
  // lmforge's own, tokenizer.model or hf-tokenizer.json for an imported checkpoint's; spm.model
  // when it names none). An unreadable tokenizer.json is its read error.
  static absl::StatusOr<std::string> tokenizer_model_file(const std::string& tok_dir);
  // check_policy, then creates the folder; `force` without `resume` first removes the old
  // checkpoints, `latest`, metrics.jsonl and tensorboard/.
  absl::Status open(bool resume, bool force) const;

  // The checkpoint name `latest` holds, or NotFound naming the file.
  absl::StatusOr<std::string> latest_name() const;

 private:
  std::string path(std::string_view name) const;  // dir/name
  std::string dir_;
};

// The rows of a metrics.jsonl in order; a missing file has none, and a line that does not parse
// (the torn last line a kill leaves) ends the read.
absl::StatusOr<std::vector<Json>> read_metrics(const std::string& path);

}  // namespace lm
