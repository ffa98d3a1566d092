// train/run_setup.h's pure parts (issue 30): the resume modes, the start-up warning when no
// checkpoint would be written, and the closing line after a resume. The folder decisions end to
// end are tests/soak/restart_test.cpp's.
#include <gtest/gtest.h>

#include "train/run_setup.h"

namespace lm::train {
namespace {

TEST(RunSetup, ResumeModes) {
  EXPECT_EQ(*parse_resume_mode(""), ResumeMode::kNo);
  EXPECT_EQ(*parse_resume_mode("yes"), ResumeMode::kYes);  // a bare --resume
  EXPECT_EQ(*parse_resume_mode("auto"), ResumeMode::kAuto);
  auto bad = parse_resume_mode("latest");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'auto'"), std::string::npos) << bad.status();
}

// Issue 30 item 9: a 60-step CPU run checkpointing every 100 steps and never by time lost all its
// work to a kill at step 30, without a word at start.
TEST(RunSetup, WarnsWhenNoCheckpointFallsBeforeTheEnd) {
  TrainConfig tc;
  tc.steps = 60;
  tc.checkpoint.interval = 100;
  tc.checkpoint.minutes = 0;
  const std::string w = no_checkpoint_warning(tc, 0);
  EXPECT_NE(w.find("no checkpoint before step 60"), std::string::npos) << w;
  EXPECT_NE(w.find("--checkpoint-minutes"), std::string::npos) << w;
  tc.checkpoint.minutes = 5;  // by time: fine
  EXPECT_EQ(no_checkpoint_warning(tc, 0), "");
  tc.checkpoint.minutes = 0;
  tc.checkpoint.interval = 20;  // steps 20 and 40 come first
  EXPECT_EQ(no_checkpoint_warning(tc, 0), "");
  EXPECT_NE(no_checkpoint_warning(tc, 40).find("before step 60"), std::string::npos);  // resumed at 40: none left
  tc.checkpoint.interval = 0;
  EXPECT_NE(no_checkpoint_warning(tc, 0).find("interval 0 is off"), std::string::npos);
  tc.stop_at_step = 10;  // the stop checkpoints first
  EXPECT_EQ(no_checkpoint_warning(tc, 0), "");
  // The presets: the CPU ones checkpoint by time too now, so none warns on a short run.
  for (const char* preset : {"tiny", "small", "124m"}) {
    TrainConfig p = preset_train_config(preset);
    p.steps = 60;
    EXPECT_EQ(no_checkpoint_warning(p, 0), "") << preset;
    EXPECT_GT(p.checkpoint.minutes, 0) << preset;
  }
}

// Issue 30 item 10: the closing line of a resumed run says which steps this start trained in its
// time (it said "trained 60 steps ... in 1m40s" for 20 steps).
TEST(RunSetup, ClosingLineAfterAResumeCountsThisStart) {
  FitSummary s;
  s.start_step = 40;
  s.steps = 60;
  s.tokens = 60 * 1024;
  s.seconds = 100;
  s.tokens_per_s = 20 * 1024 / 100.0;
  s.losses = {3.0};
  const std::string line = s.summary();
  EXPECT_NE(line.find("trained steps 41-60 (20 this start; 60 steps, 61.4k tokens in the run) in 1m40s: 205 tok/s"),
            std::string::npos)
      << line;
  s.start_step = 0;
  EXPECT_NE(s.summary().find("trained 60 steps (61.4k tokens) in 1m40s"), std::string::npos) << s.summary();
}

}  // namespace
}  // namespace lm::train
