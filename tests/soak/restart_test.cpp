// The run's life cycle end to end (issue 30): `fit --resume auto` in every state a restart loop
// can find the folder in, the run's tokenizer checked wherever a run is loaded, and export's
// refusals. Each case runs the real lmtrain / lmeval on a copy of the shared workspace
// (tests/soak/cli_harness.h): run = the 9-step tiny run stopped at step 6, ref = the same run
// uninterrupted.
#include <chrono>
#include <thread>

#include "core/run_folder.h"
#include "core/run_lock.h"
#include "tests/soak/cli_harness.h"

namespace {
using namespace lm_cli_test;

std::string weights(const fs::path& run, const char* step) {
  return slurp(run / "checkpoints" / step / "model.safetensors");
}

class Restart : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json");
  }
  // The one command a restart loop repeats.
  Result fit_auto(const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> v = {"--out", w(out), "--resume", "auto", "--tokenizer", w("tok")};
    v.insert(v.end(), extra.begin(), extra.end());
    return fit(v);
  }
  std::string ref_weights() const { return weights(shared_ws() / "ref", "step-00000009"); }
};

// No folder, an empty one, and one killed while its config.json was being written (the tokenizer
// copy and a torn temp file; the rename never happened): each is a run not started yet, and the
// same command starts it, bit-identical to the uninterrupted run.
TEST_F(Restart, ResumeAutoStartsWhereThereIsNoRunYet) {
  fs::create_directories(ws() / "empty");
  fs::create_directories(ws() / "mid" / "tokenizer");
  for (const char* f : {"spm.model", "tokenizer.json"}) fs::copy_file(ws() / "tok" / f, ws() / "mid" / "tokenizer" / f);
  spit(ws() / "mid" / "config.json.tmp.4242", "{\"model\": {\"vocab_size\": 5");
  for (const char* out : {"none", "empty", "mid"}) {
    SCOPED_TRACE(out);
    Result r = fit_auto(out);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(latest_of(out), "step-00000009");
    EXPECT_EQ(weights(ws() / out, "step-00000009"), ref_weights());
  }
}

// A run with a checkpoint continues (the closing line says which steps this start trained); a
// finished one says so and exits 0: the loop may run the command once more than needed.
TEST_F(Restart, ResumeAutoContinuesARun) {
  copy_in("run");
  Result r = fit_auto("run");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(weights(ws() / "run", "step-00000009"), ref_weights());
  EXPECT_NE(r.out.find("trained steps 7-9 (3 this start; 9 steps"), std::string::npos) << r.out;
  const Snapshot before = snapshot(ws());
  r = fit_auto("run");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("the run is finished (step 9 of 9)"), std::string::npos) << r.out;
  expect_unchanged(before, ws());
}

// Refused (exit 2, nothing written): a folder holding something else, flags that would change the
// run, a run of another preset, and --force (which starts over) with auto.
TEST_F(Restart, ResumeAutoRefusesAnotherFolderOrChangedFlags) {
  copy_in("run"); copy_in("other");
  spit(ws() / "notes" / "notes.txt", "mine");
  fs::create_directories(ws() / "notes" / "shards");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit_auto("notes"), w("notes"), "not a run folder", "notes.txt, shards/", "--resume auto");
  EXPECT_BAD_INPUT(fit_auto("run", {"--lr", "0.01"}), "train.optimizer.lr (--lr", "the run has 0.003, now 0.01");
  EXPECT_BAD_INPUT(fit_auto("other"), "model.d_model (--preset tiny", "--resume continues the run");
  EXPECT_BAD_INPUT(fit_auto("run", {"--force"}), "--resume auto", "--force");
  expect_unchanged(before, ws());
}

// Issue 30 item 13: a different tokenizer of the same vocabulary size copied into a run made
// `lmeval sample` print garbage with exit 0 and `export` ship it. Every loader now checks the
// copy against config.json's tokenizer_hash and names both hashes.
TEST_F(Restart, AnotherTokenizerInTheRunIsRefusedWhereverTheRunIsLoaded) {
  copy_in("ref");
  // Another recipe, the same vocabulary size (--model-type bpe at 512 crashed 'lmtrain tokenizer', exit 139).
  ASSERT_EQ(lmtrain({"tokenizer", "--corpus", kSampleCorpus, "--vocab-size", "512", "--max-piece-length", "4", "--out",
                     w("tok_other512")}).rc, 0);
  const lm::Json other = lm::Json::parse(slurp(ws() / "tok_other512" / "tokenizer.json"));
  const lm::Json cfg = lm::Json::parse(slurp(ws() / "ref" / "config.json"));
  ASSERT_EQ(other["vocab_size"], 512);
  const std::string run_hash = cfg["tokenizer_hash"].get<std::string>(), other_hash = other["hash"].get<std::string>();
  ASSERT_NE(run_hash, other_hash);
  for (const char* f : {"spm.model", "tokenizer.json"})
    fs::copy_file(ws() / "tok_other512" / f, ws() / "ref" / "tokenizer" / f, fs::copy_options::overwrite_existing);
  const Snapshot before = snapshot(ws());
  const std::vector<std::string> named = {run_hash, other_hash, "config.json", "tokenizer/spm.model"};
  auto expect_refused = [&](const Result& r) {
    EXPECT_EQ(r.rc, 2) << r.err;
    for (const auto& s : named) EXPECT_NE(r.err.find(s), std::string::npos) << "want '" << s << "' in: " << r.err;
  };
  expect_refused(lmeval({"sample", "--run", w("ref"), "--prompt", "a", "--max-new-tokens", "4"}));
  expect_refused(lmeval({"nll", "--run", w("ref"), "--data", w("shards"), "--max-tokens", "256", "--out", w("nll.json")}));
  expect_refused(lmtrain({"export", "--run", w("ref"), "--out", w("hf")}));
  expect_refused(lmtrain({"export", "--run", w("ref"), "--format", "gguf", "--out", w("ref.gguf")}));
  expect_refused(fit({"--out", w("ref"), "--resume", "--steps", "12"}));
  expect_unchanged(before, ws());
}

// Issue 30 item 12: export wrote over an existing folder silently, and a --step pruned by
// keep_last said "missing model.safetensors (incomplete or damaged)".
TEST_F(Restart, ExportRefusesToOverwriteAndListsTheStepsThatExist) {
  copy_in("run");  // checkpoints at steps 3 and 6
  spit(ws() / "hf" / "notes.txt", "mine");
  spit(ws() / "m.gguf", "not yet a model");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(lmtrain({"export", "--run", w("run"), "--out", w("hf")}), w("hf"), "not empty (holds notes.txt)",
                   "--force");
  EXPECT_BAD_INPUT(lmtrain({"export", "--run", w("run"), "--format", "gguf", "--out", w("m.gguf")}),
                   "already exists (a file of 15 bytes)", "--force");
  EXPECT_BAD_INPUT(lmtrain({"export", "--run", w("run"), "--step", "5", "--out", w("hf5")}),
                   "step-00000005: no checkpoint at step 5; the run has: 3, 6", "--step");
  EXPECT_BAD_INPUT(lmeval({"sample", "--run", w("run"), "--step", "9", "--prompt", "a"}), "the run has: 3, 6");
  expect_unchanged(before, ws());
  Result r = lmtrain({"export", "--run", w("run"), "--out", w("hf"), "--force"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(ws() / "hf" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(ws() / "hf" / "notes.txt"));  // --force writes the export's files, deletes nothing
}

// ---- Issue 40: one writer per run folder, and a stop within one micro-batch -------------------------

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// Issue 40 item 1: two `fit --resume auto` on one folder, as a scheduler that restarts a job while
// the old one still lives. Before: both exited 0, metrics.jsonl held every step twice and the final
// checkpoint was the other run's. Now the second is refused (exit 1: a restart loop tries again)
// naming the first's pid and host, and writes nothing; the first, stopped, resumes to the end with
// every step logged once and the weights of the unbroken run.
TEST_F(Restart, ASecondWriterIsRefusedNamingTheHolder) {
  copy_in("run");
  const std::vector<std::string> argv = {kLmtrain, "fit", "--data", w("shards"), "--config", w("run.json"), "--preset",
                                         "tiny", "--out", w("run"), "--resume", "auto", "--tokenizer", w("tok"),
                                         "--threads", "2", "-q"};
  std::vector<std::string> slow = argv;
  slow.insert(slow.end(), {"--set", "debug.slow_forward_ms=3000"});  // steps 7-9 take >= 9 s
  const pid_t first = spawn(slow, logs(), "first");
  const std::string mine = "\"pid\":" + std::to_string(first);
  ASSERT_TRUE(wait_for([&] { return slurp(ws() / "run" / "run.lock").find(mine) != std::string::npos; }, 120))
      << slurp(logs() / "first.err");
  Result second = run(argv, logs());
  EXPECT_EQ(second.rc, 1) << second.err;
  for (const std::string& want : {w("run") + ": another process is writing this run (pid " + std::to_string(first) +
                                      " on host " + host_name(),
                                  "kill " + std::to_string(first), std::string("run.lock")})
    EXPECT_NE(second.err.find(want), std::string::npos) << "want '" << want << "' in: " << second.err;
  kill(first, SIGTERM);
  EXPECT_EQ(wait_exit(first), 143) << slurp(logs() / "first.err");
  EXPECT_FALSE(fs::exists(ws() / "run" / "run.lock")) << "released at exit";
  Result again = run(argv, logs());
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(weights(ws() / "run", "step-00000009"), ref_weights());
  std::vector<int64_t> steps;
  const auto rows = lm::read_metrics((ws() / "run" / "metrics.jsonl").string());
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const auto& row : *rows) steps.push_back(row["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// Readers take no lock: lmeval reads a run while its writer holds it. A lock file a dead process
// left (kill -9: the kernel dropped its flock) is taken over, and the run ends as the unbroken one.
TEST_F(Restart, ReadersNeedNoLockAndADeadWritersLockIsTakenOver) {
  copy_in("run");
  {
    auto held = lm::RunLock::acquire(w("run"));  // this test process plays the writer
    ASSERT_TRUE(held.ok()) << held.status();
    Result busy = fit_auto("run");
    EXPECT_EQ(busy.rc, 1) << busy.err;
    EXPECT_NE(busy.err.find("(pid " + std::to_string(getpid()) + " on host " + host_name()), std::string::npos)
        << busy.err;
    Result eval = lmeval({"nll", "--run", w("run"), "--data", w("shards"), "--max-tokens", "256", "--out", w("nll.json")});
    EXPECT_EQ(eval.rc, 0) << eval.err;
  }
  spit(ws() / "run" / "run.lock",
       R"({"pid": 999999, "host": "gone", "started": "2026-12-01 00:00:00 UTC", "command": "lmtrain fit"})");
  Result r = fit_auto("run");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(weights(ws() / "run", "step-00000009"), ref_weights());
  EXPECT_FALSE(fs::exists(ws() / "run" / "run.lock"));
}

// Issue 40 item 6: SIGTERM with --grad-accum 200 was heard only after the step (26.7 s at the
// issue's size). Each micro-batch here takes >= 30 ms (debug.slow_forward_ms), a step >= 6 s; the
// signal lands ~1 s into step 2 and the run exits 143 within a few micro-batches' time (checkpoint
// of step 1 included), step 2 dropped. Bit-identity of the resume: StopMidStep (tests/train).
TEST_F(Restart, SigtermDuringGradAccum200StopsWithinOneMicroBatch) {
  const std::vector<std::string> argv = {kLmtrain, "fit", "--data", w("shards"), "--config", w("run.json"), "--preset",
                                         "tiny", "--tokenizer", w("tok"), "--out", w("ga"), "--steps", "3",
                                         "--grad-accum", "200", "--micro-batch", "1", "--set",
                                         "debug.slow_forward_ms=30", "--threads", "2", "-q"};
  const pid_t pid = spawn(argv, logs(), "ga");
  ASSERT_TRUE(wait_for([&] { return fs::exists(ws() / "ga" / "metrics.jsonl") &&
                                    !slurp(ws() / "ga" / "metrics.jsonl").empty(); }, 180))
      << slurp(logs() / "ga.err");
  std::this_thread::sleep_for(std::chrono::seconds(1));  // into step 2
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  const int rc = wait_exit(pid);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = slurp(logs() / "ga.err");
  EXPECT_EQ(rc, 143) << err;
  std::fprintf(stderr, "SIGTERM to exit: %.2f s\n", took);
  EXPECT_LT(took, 3.0) << err;
  EXPECT_NE(err.find("during step 2 (after "), std::string::npos) << err;
  EXPECT_NE(err.find("of its 200 micro-batches): the step is dropped"), std::string::npos) << err;
  EXPECT_EQ(latest_of("ga"), "step-00000001");
}

// Issue 40 item 7: a resume on another thread count was not bit-identical (the weights differed,
// the losses did not) and said nothing; with --threads 0 a busy machine switched counts silently.
// The checkpoint records its count; a resume keeps it unless --threads says otherwise, and then
// warns that the weights will differ.
TEST_F(Restart, AResumeOnAnotherThreadCountSaysTheWeightsWillDiffer) {
  copy_in("run");
  EXPECT_EQ(Json::parse(slurp(ws() / "run" / "checkpoints" / "step-00000006" / "trainer.json"))["threads"], 2);
  Result r = run({kLmtrain, "fit", "--data", w("shards"), "--out", w("run"), "--resume", "--threads", "1", "-q"}, logs());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("threads: this start trains on 1, the checkpoint it resumes was trained on 2"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--threads 2, to continue bit-identically"), std::string::npos) << r.err;
}

}  // namespace