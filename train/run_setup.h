// Run set-up: the decisions between a front end's options and the training loop, kept out of
// the command line so another front end (a binding, a service) makes the same ones. set_up_run
// turns FitOptions (the flags of `lmtrain fit`) into a FitRequest with everything it points to:
//   1. the run folder and the resume mode (start, continue, or refuse: --resume, --resume auto);
//   2. the config: a new run is preset < --config < flags; a resume is the run's config.json <
//      --preset (shape) < --config < flags, then train::plan_resume decides what may change;
//   3. device and ranks: auto device/dtype, this rank's GPU, the process group;
//   4. shards and tokenizer: the tokenizer the shards were made with (hash, vocabulary, framing),
//      the run's own copy checked against config.json on a resume; the data of a resume;
//   5. the batch sampler and validation windows; a new run's tokenizer copy in the folder.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/run_lock.h"
#include "tokenizer/tokenizer.h"
#include "train/config.h"
#include "train/data_source.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace lm::train {

// How `fit` treats an existing run folder.
enum class ResumeMode {
  kNo,    // start a run; an existing one is refused (unless force)
  kYes,   // continue the run; none there is refused
  kAuto,  // continue when the folder holds a run, start when it holds none yet (the restart loop)
};
// "" or "no", "yes" (a bare --resume), "auto".
absl::StatusOr<ResumeMode> parse_resume_mode(const std::string& text);

// What `lmtrain fit` collects from its flags, one to one.
struct FitOptions {
  std::string data, out, config, tokenizer;
  std::optional<std::string> preset;  // unset: "small" for a new run, the run's own on a resume
  std::string init_from;              // exported HF folder whose weights start the run
  ResumeMode resume = ResumeMode::kNo;
  bool force = false;
  bool allow_new_data = false;  // resume on other shards: continued pretraining
  int dist_timeout_s = 300;     // collective timeout: a dead rank fails the others loudly
  bool ddp_post_backward = false;  // all-reduce after backward instead of overlapped
  int threads = 0;                 // > 0: train.hardware.threads (the global --threads)
  TrainOverrides flags;            // --set and the short flags, in command-line order
};

// A fit ready to run. Heap-allocated and never moved: req.codec points into `tok`, req.comm
// into `comm`.
struct RunSetup {
  RunLock lock;  // first: released last, after everything below (core/run_lock.h)
  FitRequest req;
  bool resuming = false;  // continues an existing run (--resume, or --resume auto that found one)
  bool finished = false;  // a resume of a run at its last step: nothing to train
  int64_t done_step = 0;  // the latest checkpoint's step on a resume (0 without one)
  std::unique_ptr<Comm> comm;
  tokenizer::Tokenizer tok;
  std::unique_ptr<SamplerSource> source;
  ValSets val;
};

// The warning fit logs at start when a kill before the end would lose every step of this start:
// no step checkpoint (checkpoint.interval) falls before train.steps, none comes by time
// (checkpoint.minutes 0) and no earlier stop_at_step checkpoints. Empty when one would.
std::string no_checkpoint_warning(const TrainConfig& tc, int64_t from_step);

// English replay (docs/continued-pretraining.md): "" unless `init_from` is an extended checkpoint
// (it holds extension.json from `lmtrain extend-model`) and the mixture's shares per language
// (`shares`, summing to 1) give English ("en") nothing; then the warning fit prints at its start.
std::string replay_warning(const std::string& init_from, const std::map<std::string, double>& shares);

// Steps 1-5 above. Errors: a wrong resume mode or folder, refused changes on a resume, bad
// shards or tokenizer (all exit 2 through core/status.h), a failed process-group connect.
absl::StatusOr<std::unique_ptr<RunSetup>> set_up_run(const FitOptions& o);

}  // namespace lm::train
