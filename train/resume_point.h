// Which checkpoint a resume continues from (issue 40). `latest` names the newest complete
// checkpoint, but a damaged one (a flipped bit, a truncated or emptied file, an edited
// trainer.json) stopped a restart loop for good, and a missing `latest` restarted the run from
// step 0 over intact checkpoints. A resume now takes the newest checkpoint that verifies
// (manifest checksums, core/checkpoint_manifest.h; trainer.json readable and of its folder's
// step), says which newer ones it skipped and why, and sets those aside by renaming them
// (step-N.damaged): nothing of a newer checkpoint is deleted or truncated. With any checkpoint
// present the run never starts over from step 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::train {

struct ResumePoint {
  std::string checkpoint;             // the folder to resume from; empty: the run has none (step 0)
  int64_t step = 0;                   // its step
  std::vector<std::string> skipped;   // newer checkpoints that failed: "step-00000030: <why>"
  std::vector<int64_t> skipped_steps; // their steps, for settle_resume_point
  std::string latest;                 // what `latest` names ("" when the file is missing)
  bool unverified = false;            // the chosen one has no manifest (written before checksums)
  int threads = 0;                    // its trainer.json "threads" (the CPU count it trained on; 0 unknown)
};

// Looks at every checkpoints/step-N folder, newest first, and takes the first that verifies.
// No checkpoint and no `latest`: an empty point (the run starts at step 0). Checkpoints, but none
// verifies (or `latest` names one that is gone and there is no other): DataLoss listing each one
// and why, and nothing is changed.
absl::StatusOr<ResumePoint> choose_resume_point(const std::string& run_dir);

// Says what choose_resume_point found (warnings: each skipped checkpoint and why, a missing or
// stale `latest`), renames each skipped checkpoint to step-N.damaged (step-N.damaged.2, ... when
// taken) and points `latest` at the chosen one. Rank 0, under the run lock, once the chosen
// checkpoint has loaded.
absl::Status settle_resume_point(const std::string& run_dir, const ResumePoint& point);

}  // namespace lm::train
