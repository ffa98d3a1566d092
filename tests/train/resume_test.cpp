// Resume = continue the same run (issue 21, point 1): config.json is the truth; what may change.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "model/safetensors.h"
#include "runtime/runtime.h"
#include "train/checkpoint.h"
#include "train/resume.h"
#include "train/resume_point.h"
#include "train/trainer.h"
#include "tests/train/synthetic_source.h"

namespace lm::train {
namespace {
namespace fs = std::filesystem;

fs::path temp_run(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_resume_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  return p;
}

// Every step logged, a checkpoint every 5: the resume points these tests need.
FitRequest tiny(const fs::path& dir, int64_t steps) {
  FitRequest r = testing::tiny_request(dir, steps);
  r.train.schedule.warmup_steps = 3;
  r.train.logging.interval = 1;
  r.train.checkpoint.interval = 5;
  return r;
}

const auto fit_on_synthetic = testing::fit_synthetic;

std::vector<Json> metrics_of(const FitRequest& r) { return *read_metrics(r.run_dir + "/metrics.jsonl"); }

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    init_output(/*quiet=*/true);
    run_.steps = 40;
    ASSERT_TRUE(resolve(run_, model_).ok());
  }
  model::ModelConfig model_ = *model::preset("tiny");
  TrainConfig run_;
  SourceOf by_flag_ = [](const std::string& f) { return f == "train.optimizer.lr" ? std::string("--lr") : std::string(); };
};

// Every field that defines the run is named with both values, in one message.
TEST_F(ResumeTest, RefusesEachChangeThatWouldAlterTheRun) {
  TrainConfig now = run_;
  now.optimizer.lr = 1e-3;
  now.batch.micro_batch = 4;
  model::ModelConfig m = model_;
  m.d_ff = 96;
  auto plan = plan_resume(model_, run_, m, now, 10, 1, by_flag_);
  ASSERT_FALSE(plan.ok());
  const std::string msg(plan.status().message());
  for (const char* want : {"train.optimizer.lr (--lr): the run has 0.003, now 0.001", "train.batch.micro_batch: the run has 8, now 4",
                           "model.d_ff", "--resume continues the run with its own config.json"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  EXPECT_EQ(msg.find("train.steps"), std::string::npos) << "unchanged fields are not listed: " << msg;
}

// Knobs of this invocation change freely; the same config is a plain continuation.
TEST_F(ResumeTest, InvocationKnobsMayChange) {
  TrainConfig now = run_;
  now.hardware.threads = 7;
  now.stop_at_step = 30;
  now.hardware.device = "cuda";
  now.checkpoint.interval = 3;
  now.checkpoint.minutes = 2;  // issue 30: an old run (minutes 0) may add time-based checkpoints
  auto plan = plan_resume(model_, run_, model_, now, 10, 1, by_flag_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->notes.empty());
  EXPECT_FALSE(plan->finished);
  EXPECT_EQ(plan->changes.size(), 5u);
  auto same = plan_resume(model_, run_, model_, run_, 10, 1, by_flag_);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->changes.empty());
}

// The budget re-plans: the note states the new lr (lr_at over the new total), fewer steps than
// done is refused, and a run at its last step is finished.
TEST_F(ResumeTest, BudgetReplansRefusesBelowDoneAndKnowsFinished) {
  TrainConfig now = run_;
  now.steps = 80;
  auto plan = plan_resume(model_, run_, model_, now, 40, 1, by_flag_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->notes.size(), 1u);
  const std::string note = plan->notes[0];
  EXPECT_NE(note.find("40 -> 80 steps (extended)"), std::string::npos) << note;
  EXPECT_NE(note.find(absl::StrFormat("lr at step 41 is %.4g", lr_at(now, 40))), std::string::npos) << note;
  // Cosine re-planned over 80 steps: at step 41 the lr is back near the middle of the curve.
  EXPECT_GT(lr_at(now, 40), 5 * lr_at(run_, 39));
  now.steps = 30;
  auto fewer = plan_resume(model_, run_, model_, now, 35, 1, by_flag_);
  ASSERT_FALSE(fewer.ok());
  EXPECT_NE(std::string(fewer.status().message()).find("fewer than the 35 steps the run has already done"),
            std::string::npos) << fewer.status();
  auto done = plan_resume(model_, run_, model_, run_, 40, 1, by_flag_);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->finished);
}

// Killed before its first checkpoint: --resume starts over from step 0 (and matches a run that
// was never interrupted), instead of "no checkpoint yet ... start without --resume".
TEST_F(ResumeTest, RunWithoutCheckpointResumesFromStepZero) {
  auto ref = tiny(temp_run("ref0"), 8);
  auto sr = fit_on_synthetic(ref);
  ASSERT_TRUE(sr.ok()) << sr.status();
  auto r = tiny(temp_run("nockpt"), 8);
  r.train.debug.inject_nan_step = 2;  // stops at step 3, before the first checkpoint (step 5)
  ASSERT_FALSE(fit_on_synthetic(r).ok());
  ASSERT_TRUE(fs::exists(r.run_dir + "/config.json"));
  ASSERT_FALSE(fs::exists(r.run_dir + "/latest"));
  r.train.debug.inject_nan_step = -1;
  r.resume = true;
  auto s = fit_on_synthetic(r);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_step, 0);
  EXPECT_EQ(s->steps, 8);
  EXPECT_EQ(s->losses, sr->losses);
  EXPECT_EQ(metrics_of(r).size(), 8u) << "the lines of the failed attempt are cut";
}

// An extended run follows lr_at over the new total from the resume step on, and config.json
// then holds the new budget (the report and the next resume read it).
TEST_F(ResumeTest, ExtendedRunFollowsTheReplannedScheduleAndRecordsIt) {
  auto r = tiny(temp_run("extend"), 10);
  ASSERT_TRUE(fit_on_synthetic(r).ok());
  r.resume = true;
  r.train.steps = 16;
  auto s = fit_on_synthetic(r);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_step, 10);
  EXPECT_EQ(s->steps, 16);
  TrainConfig want = r.train;
  ASSERT_TRUE(resolve(want, r.model).ok());
  const auto rows = metrics_of(r);
  ASSERT_EQ(rows.size(), 16u);
  for (const Json& row : rows) {
    const int64_t step = row["step"].get<int64_t>();
    TrainConfig plan = want;
    plan.steps = step <= 10 ? 10 : 16;  // the old plan up to the resume, the new one after
    EXPECT_DOUBLE_EQ(row["lr"].get<double>(), lr_at(plan, step - 1)) << "step " << step;
  }
  auto cfg = read_json_file(r.run_dir + "/config.json");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ((*cfg)["train"]["steps"], 16);
}

// At its last step a resume trains nothing and says so.
TEST_F(ResumeTest, FinishedRunSummarySaysNothingToTrain) {
  auto r = tiny(temp_run("finished"), 5);
  ASSERT_TRUE(fit_on_synthetic(r).ok());
  r.resume = true;
  auto s = fit_on_synthetic(r);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->summary().find("nothing to train"), std::string::npos) << s->summary();
  EXPECT_EQ(s->summary().find("tok/s"), std::string::npos) << s->summary();
}

// Continued pretraining: the data cursor is not restored, weights/optimizer/step are.
TEST_F(ResumeTest, NewDataKeepsTheStepButStartsTheDataOrderFresh) {
  auto r = tiny(temp_run("newdata"), 10);
  ASSERT_TRUE(fit_on_synthetic(r).ok());
  r.resume = true;
  r.new_data = true;
  r.train.steps = 12;
  testing::SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
  auto s = fit(r, src, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_step, 10);
  EXPECT_EQ(src.cursor()["call"], 2) << "the new data is read from its start";
}

// ---- Issue 40: which checkpoint a resume continues from -----------------------------------------

// A run of 15 steps stopped at 10 (checkpoints 5 and 10), and the same 15 steps unbroken.
class FallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    init_output(/*quiet=*/true);
    ref_ = tiny(temp_run(name() + "_ref"), 15);
    auto sr = fit_on_synthetic(ref_);
    ASSERT_TRUE(sr.ok()) << sr.status();
    ref_losses_ = sr->losses;
    run_ = tiny(temp_run(name()), 15);
    run_.train.stop_at_step = 10;
    ASSERT_TRUE(fit_on_synthetic(run_).ok());
    run_.train.stop_at_step = -1;
    run_.resume = true;
  }
  static std::string name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }
  std::string ckpt(const FitRequest& r, int64_t step) const { return RunFolder(r.run_dir).checkpoint(step); }
  static void flip_bit(const std::string& path, size_t at) {
    std::string b = *read_file(path);
    b[at % b.size()] ^= 0x10;
    ASSERT_TRUE(write_file_atomic(path, b).ok());
  }
  FitRequest ref_, run_;
  std::vector<double> ref_losses_;
};

// A flipped bit in the newest checkpoint's weights: the resume skips it (naming the file), sets it
// aside untouched as step-N.damaged, continues from step 5 and ends bit-identical to the unbroken
// run. Before: the bit loaded silently and the run went on from other weights.
TEST_F(FallbackTest, DamagedNewestIsSkippedSetAsideAndTheOlderOneResumesExactly) {
  const std::string model10 = ckpt(run_, 10) + "/model.safetensors";
  flip_bit(model10, 4321);
  const std::string damaged = *read_file(model10);
  auto point = choose_resume_point(run_.run_dir);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->step, 5);
  ASSERT_EQ(point->skipped.size(), 1u);
  EXPECT_NE(point->skipped[0].find("step-00000010: " + model10 + ": checksum mismatch"), std::string::npos)
      << point->skipped[0];
  auto s = fit_on_synthetic(run_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_step, 5);
  EXPECT_EQ(s->losses, std::vector<double>(ref_losses_.begin() + 5, ref_losses_.end()));
  EXPECT_EQ(*read_file(ckpt(run_, 10) + ".damaged/model.safetensors"), damaged) << "set aside byte for byte";
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(*read_file(ckpt(run_, 15) + "/" + f), *read_file(ckpt(ref_, 15) + "/" + f)) << f;
  EXPECT_EQ(*RunFolder(run_.run_dir).latest_name(), "step-00000015");
}

// An edited trainer.json that is still valid JSON (the data cursor moved on) is caught the same way.
TEST_F(FallbackTest, EditedTrainerStateIsCaught) {
  const std::string path = ckpt(run_, 10) + "/trainer.json";
  Json t = *read_json_file(path);
  t["data_cursor"]["call"] = t["data_cursor"]["call"].get<int64_t>() + 1;
  ASSERT_TRUE(write_json_file(path, t).ok());
  auto point = choose_resume_point(run_.run_dir);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->step, 5);
  ASSERT_EQ(point->skipped.size(), 1u);
  EXPECT_NE(point->skipped[0].find("trainer.json: checksum mismatch"), std::string::npos) << point->skipped[0];
}

// `latest` deleted with checkpoints 5 and 10 there: the resume continues from 10, not from step 0,
// and metrics.jsonl keeps its first 10 lines. Before: "no checkpoint yet; starting the run from step
// 0", metrics.jsonl cut to nothing.
TEST_F(FallbackTest, MissingLatestResumesFromTheNewestCheckpointNotFromZero) {
  fs::remove(RunFolder(run_.run_dir).latest());
  auto s = fit_on_synthetic(run_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_step, 10);
  EXPECT_EQ(metrics_of(run_).size(), 15u);
  EXPECT_EQ(s->losses, std::vector<double>(ref_losses_.begin() + 10, ref_losses_.end()));
}

// Every checkpoint damaged: an error naming each and why, and nothing changed (no restart from 0).
TEST_F(FallbackTest, NoCheckpointVerifiesIsAnErrorThatChangesNothing) {
  flip_bit(ckpt(run_, 10) + "/optimizer.safetensors", 999);
  const std::string opt5 = ckpt(run_, 5) + "/optimizer.safetensors";
  ASSERT_TRUE(write_file_atomic(opt5, "").ok());  // emptied
  const std::string metrics = *read_file(run_.run_dir + "/metrics.jsonl");
  auto s = fit_on_synthetic(run_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  const std::string msg(s.status().message());
  for (const std::string& want : {std::string("no checkpoint of this run verifies"), "step-00000010: " + ckpt(run_, 10),
                                  "step-00000005: " + opt5 + ": 0 bytes", std::string("not restarted from step 0")})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  EXPECT_EQ(*read_file(run_.run_dir + "/metrics.jsonl"), metrics);
  EXPECT_TRUE(fs::exists(ckpt(run_, 10)) && fs::exists(ckpt(run_, 5)));
  EXPECT_EQ(*RunFolder(run_.run_dir).latest_name(), "step-00000010");
}

// ---- Issue 40: a stop is heard within one micro-batch ----------------------------------------------

// The synthetic rows, with a stop request (as SIGTERM's handler makes) at a chosen window.
class StopAtWindow : public testing::SyntheticSource {
 public:
  StopAtWindow(int64_t rows, int64_t len, int64_t vocab, int64_t stop_at)
      : SyntheticSource(rows, len, vocab), stop_at_(stop_at) {}
  void next(std::vector<int32_t>* out) override {
    if (++fetched_ == stop_at_) request_stop(SIGTERM);
    if (fetched_ > stop_at_) ++after_;
    SyntheticSource::next(out);
  }
  int64_t after_ = 0;  // windows fetched after the stop request

 private:
  int64_t stop_at_, fetched_ = 0;
};

// grad_accum 200: a SIGTERM in the middle of step 3's micro-batches stops the run within one
// micro-batch, drops step 3 whole (its partial gradients and windows), checkpoints step 2, and the
// resume is bit-identical to an unbroken run. Before: step 3 ran its remaining ~140 micro-batches
// (26.7 s at the size) and the run stopped after step 3.
TEST(StopMidStep, GradAccum200StopsWithinOneMicroBatchAndResumesExactly) {
  init_output(/*quiet=*/true);
  auto req = [](const std::string& name) {
    FitRequest r = testing::tiny_request(temp_run(name), 4);
    r.train.batch.micro_batch = 1;
    r.train.batch.seq_len = 16;
    r.train.batch.grad_accum = 200;
    r.train.logging.interval = 1;
    r.train.checkpoint.interval = 0;
    return r;
  };
  FitRequest ref = req("stop_ref"), run = req("stop_run");
  auto sr = testing::fit_synthetic(ref);
  ASSERT_TRUE(sr.ok()) << sr.status();
  StopAtWindow src(1, 17, run.model.vocab_size, /*stop_at=*/2 * 200 + 60);  // step 3, micro-batch 60
  auto stopped = fit(run, src, {});
  request_stop(0);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->stop_signal, SIGTERM);
  EXPECT_EQ(stopped->steps, 2) << "step 3 is dropped, not finished";
  EXPECT_LE(src.after_, 1) << "micro-batches run after the stop request";
  EXPECT_EQ(*RunFolder(run.run_dir).latest_name(), "step-00000002");
  run.resume = true;
  auto resumed = testing::fit_synthetic(run);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->start_step, 2);
  EXPECT_EQ(resumed->losses, std::vector<double>(sr->losses.begin() + 2, sr->losses.end()));
  EXPECT_EQ(*read_file(RunFolder(run.run_dir).checkpoint(4) + "/model.safetensors"),
            *read_file(RunFolder(ref.run_dir).checkpoint(4) + "/model.safetensors"));
}

}  // namespace
}  // namespace lm::train