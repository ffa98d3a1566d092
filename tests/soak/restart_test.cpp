// The run's life cycle end to end (issue 30): `fit --resume auto` in every state a restart loop
// can find the folder in, the run's tokenizer checked wherever a run is loaded, and export's
// refusals. Each case runs the real lmtrain / lmeval on a copy of the shared workspace
// (tests/soak/cli_harness.h): run = the 9-step tiny run stopped at step 6, ref = the same run
// uninterrupted.
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

}  // namespace
