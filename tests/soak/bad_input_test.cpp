// The bad-input matrix of docs/reliability.md (issue 12), end to end: every case runs the real
// lmtrain / lmeval and checks the exit code (2 for bad input, a full disk included), the message
// on stderr, and that no file that existed before the command was changed, deleted or added to.
// A shared workspace (tokenizers, shards, runs of the tiny preset) is built once per build tree;
// each test works on its own copy, so a damaged file never leaks into another test.
#include "absl/strings/str_split.h"
#include "tests/soak/cli_harness.h"

namespace {
using namespace lm_cli_test;

// ---- corpus and tokenizer inputs (lmtrain prepare / tokenizer) --------------------------------

// A corpus.json with one source of `format` reading `file` (written with `bytes` unless null).
std::string corpus_with(const fs::path& dir, const std::string& file, const char* bytes,
                        const std::string& format = "lines") {
  if (bytes != nullptr) spit(dir / file, bytes);
  const std::string extra = format == "jsonl" ? R"(, "text_field": "text")" : "";
  spit(dir / "corpus.json", R"({"sources": [{"paths": [")" + file + R"("], "format": ")" + format + R"(", "lang": "bn")" +
                                extra + "}]}");
  return (dir / "corpus.json").string();
}

TEST_F(BadInput, CorpusManifestMissing) {
  copy_in("tok"); copy_in("shards");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(w("nope/corpus.json")), "nope/corpus.json");
  expect_unchanged(before, ws());
}

TEST_F(BadInput, CorpusFileMissing) {
  copy_in("tok"); copy_in("shards");
  const std::string corpus = corpus_with(ws() / "corpus", "missing.txt", nullptr);
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(corpus), "missing.txt", "no file matches");
  expect_unchanged(before, ws());
}

TEST_F(BadInput, CorpusEmpty) {
  copy_in("tok"); copy_in("shards");
  const std::string corpus = corpus_with(ws() / "corpus", "empty.txt", "");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(corpus), "corpus.json", "no documents");
  expect_unchanged(before, ws());
  EXPECT_BAD_INPUT(lmtrain({"tokenizer", "--corpus", corpus, "--vocab-size", "400", "--out", w("tok"), "--force"}),
                   "no text");
  expect_unchanged(before, ws());
}

// Issue 40 item 9: prepare on one line of 200 MB without a newline grew without bound, and under a
// memory cap aborted ("terminate called without an active exception") leaving .prepare.tmp. A
// document (or line) is capped at 64 MiB: a clear error naming file:line, the existing shards
// untouched, no staging folder left.
TEST_F(BadInput, CorpusLineOverTheDocumentCapIsRefusedWithNoTempFolderLeft) {
  copy_in("tok"); copy_in("shards");
  const std::string corpus = corpus_with(ws() / "corpus", "huge.txt", ("short line\n" + std::string((65 << 20), 'a')).c_str());
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(corpus), "huge.txt:2: a document longer than 64 MiB");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "shards" / ".prepare.tmp"));
}

TEST_F(BadInput, CorpusInvalidUtf8NamesFileAndLine) {
  copy_in("tok"); copy_in("shards");
  const std::string corpus = corpus_with(ws() / "corpus", "bad.txt", "a good line\nnot \xff valid\n");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(corpus), "bad.txt:2", "UTF-8");
  expect_unchanged(before, ws());
  EXPECT_BAD_INPUT(lmtrain({"tokenizer", "--corpus", corpus, "--vocab-size", "400", "--out", w("tok"), "--force"}),
                   "bad.txt:2", "UTF-8");
  expect_unchanged(before, ws());
}

TEST_F(BadInput, JsonlLineNotJson) {
  copy_in("tok"); copy_in("shards");
  const std::string corpus =
      corpus_with(ws() / "corpus", "docs.jsonl", "{\"text\": \"one\"}\nthis is not json\n", "jsonl");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(corpus), "docs.jsonl:2");
  expect_unchanged(before, ws());
}

TEST_F(BadInput, JsonlLineWithoutTextField) {
  copy_in("tok"); copy_in("shards");
  const std::string corpus =
      corpus_with(ws() / "corpus", "docs.jsonl", "{\"text\": \"one\"}\n{\"body\": \"two\"}\n", "jsonl");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(corpus), "docs.jsonl:2", "text");
  expect_unchanged(before, ws());
}

// The error comes after some shards could already be full: prepare must not have replaced any
// shard of the existing folder by then (the manifest would describe other files).
TEST_F(BadInput, BadLineLateInTheCorpusLeavesExistingShardsAlone) {
  copy_in("tok"); copy_in("shards");
  spit(ws() / "corpus" / "bad.txt", "a good line\nnot \xff valid\n");
  spit(ws() / "corpus" / "corpus.json",
       R"({"sources": [{"paths": [")" LM_SOURCE_DIR R"(/data/sample/bn_news.txt.gz"], "format": "lines", "lang": "bn"},
                      {"paths": ["bad.txt"], "format": "lines", "lang": "bn"}]})");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(lmtrain({"prepare", "--corpus", w("corpus/corpus.json"), "--tokenizer", w("tok"), "--out",
                            w("shards"), "--shard-tokens", "2000", "--force"}),
                   "bad.txt:2");
  expect_unchanged(before, ws());
}

TEST_F(BadInput, TokenizerFileNotSentencePiece) {
  copy_in("tok"); copy_in("shards"); copy_in("run.json");
  spit(ws() / "tok" / "spm.model", "this is not a protobuf");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(prepare(kSampleCorpus), "tok/spm.model", "not a valid SentencePiece model");
  expect_unchanged(before, ws());
  EXPECT_BAD_INPUT(fit({"--tokenizer", w("tok"), "--out", w("run")}), "tok/spm.model", "not a valid SentencePiece model");
  expect_unchanged(before, ws());
}

// ---- run config (lmtrain fit --config) ---------------------------------------------------------

class BadConfig : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json");
  }
  void expect_refused(const std::string& json, const std::vector<std::string>& needles) {
    spit(ws() / "bad.json", json);
    const Snapshot before = snapshot(ws());
    Result r = lmtrain({"fit", "--data", w("shards"), "--preset", "tiny", "--config", w("bad.json"), "--tokenizer", w("tok"),
                        "--out", w("new")});
    EXPECT_EQ(r.rc, 2) << r.err;
    for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "want '" << n << "' in: " << r.err;
    expect_unchanged(before, ws());
    EXPECT_FALSE(fs::exists(ws() / "new")) << "a refused run must not create its folder";
  }
};

TEST_F(BadConfig, UnknownKeyNamesDottedPath) {
  expect_refused(R"({"train": {"stepz": 3}})", {"bad.json", "train.stepz"});
  expect_refused(R"({"model": {"d_modle": 64}})", {"bad.json", "model.d_modle"});
}

// A --config file (or a run's config.json) from before the config sections: where each key went.
TEST_F(BadConfig, FlatTrainConfigSaysWhereEachKeyMoved) {
  expect_refused(R"({"train": {"steps": 3, "lr": 0.01, "log_interval": 1}})",
                 {"bad.json", "a flat training config", "lr -> train.optimizer.lr",
                  "log_interval -> train.logging.interval", R"("optimizer":{"lr":0.01})"});
}

// --set is read through the same strict reader: an unknown dotted key suggests the nearest one,
// a wrong type names the flag and the field; nothing is created either way.
TEST_F(BadConfig, SetNamesTheFlagTheFieldAndTheNearestKey) {
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--set", "optimizer.lrr=0.1", "--out", w("new")}),
                   "--set optimizer.lrr: train.optimizer.lrr: unknown key (did you mean 'optimizer.lr'?)");
  EXPECT_BAD_INPUT(fit({"--set", "batch.micro_batch=two", "--out", w("new")}),
                   "--set batch.micro_batch: train.batch.micro_batch: expected a number, got 'two'");
  EXPECT_BAD_INPUT(fit({"--set", "batch.micro_batch=-4", "--out", w("new")}),
                   "train.batch.micro_batch: must be positive, got -4");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new"));
}

TEST_F(BadConfig, WrongTypeNamesDottedPath) { expect_refused(R"({"train": {"steps": "five"}})", {"train.steps"}); }

TEST_F(BadConfig, NegativeBatch) {
  expect_refused(R"({"train": {"batch": {"micro_batch": -4}}})", {"train.batch.micro_batch: must be positive, got -4"});
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--micro-batch", "-4", "--out", w("new")}), "train.batch.micro_batch: must be positive, got -4");
  expect_unchanged(before, ws());
}

TEST_F(BadConfig, NotJsonNamesLine) { expect_refused("{\"train\": {\n  \"steps\": 3,\n}", {"bad.json:3"}); }

TEST_F(BadConfig, NegativeNanSkipLimit) {
  expect_refused(R"({"train": {"nan_skip_limit": -1}})", {"train.nan_skip_limit"});
}

// Issue 40 item 8: values that passed or misled. A key set twice (the last won silently and an
// earlier optimizer.lr was lost) names its path and both values; eps <= 0 trained; --seq-len 1 failed
// as "start-up verification failed ... zero gradient", which read as a bug in lmforge.
TEST_F(BadConfig, DuplicateKeyEpsAndSeqLenAreRefusedByName) {
  expect_refused(R"({"train": {"optimizer": {"lr": 0.003, "beta1": 0.9, "lr": 0.01}}})",
                 {"bad.json: train.optimizer.lr: duplicate key", "first 0.003, then 0.01"});
  expect_refused(R"({"train": {"optimizer": {"eps": -1}}})", {"train.optimizer.eps: must be positive", "got -1"});
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--seq-len", "1", "--out", w("new")}), "train.batch.seq_len: 1 is too short",
                   "--seq-len 2 or more");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new"));
}

// Issue 40 items 6, 9: sizes checked before the run folder exists. --grad-accum 1000000000 was
// accepted ("1024.00B tokens/step") and ignored SIGTERM for 9.5 minutes; --micro-batch 100000
// started, died on a raw allocator error with a C++ stack, and left a folder only --force cleared.
TEST_F(BadConfig, SizesThatCannotWorkAreRefusedBeforeTheFolderExists) {
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--grad-accum", "1000000000", "--out", w("new")}),
                   "train.batch.grad_accum: 1000000000 micro-batches per step is above the limit of 65536");
  EXPECT_BAD_INPUT(fit({"--micro-batch", "1000000", "--out", w("new")}), "train.batch.micro_batch: 1000000 x seq_len 32",
                   "GB available", "--micro-batch");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new")) << "a refused run must not create its folder";
}

// A run that is all warmup says so (it ran silently at a tiny lr before).
TEST_F(BadConfig, AllWarmupRunWarns) {
  Result r = fit({"--steps", "3", "--set", "schedule.warmup_steps=20", "--out", w("warm")});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("train.schedule.warmup_steps 20 is not below train.steps 3"), std::string::npos) << r.err;
}

// ---- token shards (lmtrain fit --data) ---------------------------------------------------------

class BadShard : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json");
    for (const auto& e : fs::directory_iterator(ws() / "shards"))
      if (e.path().filename().string().find(".train.") != std::string::npos) shard_ = e.path();
    ASSERT_FALSE(shard_.empty());
  }
  void damage(const std::function<void(std::string&)>& f) {
    std::string b = slurp(shard_);
    f(b);
    spit(shard_, b);
  }
  Result fit_new() { return fit({"--out", w("new")}); }
  fs::path shard_;
};

TEST_F(BadShard, WrongMagic) {
  damage([](std::string& b) { b.replace(0, 4, "NOPE"); });
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit_new(), shard_.filename().string(), "magic");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new"));
}

TEST_F(BadShard, TruncatedPayload) {
  damage([](std::string& b) { b.resize(b.size() - 16); });
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit_new(), shard_.filename().string(), "truncated");
  expect_unchanged(before, ws());
}

TEST_F(BadShard, FlippedPayloadByte) {
  damage([](std::string& b) { b[b.size() / 2] ^= 0x10; });
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit_new(), shard_.filename().string(), "checksum");
  expect_unchanged(before, ws());
}

// Issue 40 item 8: a validation shard listed twice in the manifest was accepted (its tokens
// counted twice in every validation loss).
TEST_F(BadShard, ValidationShardListedTwiceIsRefused) {
  Json m = Json::parse(slurp(ws() / "shards" / "manifest.json"));
  Json val;
  for (const Json& e : m["shards"])
    if (e["split"] == "val") val = e;
  ASSERT_FALSE(val.is_null());
  m["shards"].push_back(val);
  spit(ws() / "shards" / "manifest.json", m.dump(2));
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit_new(), "manifest.json: shards[", "'" + val["path"].get<std::string>() + "' is listed twice",
                   "split val");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new"));
}

// Issue 40 item 5: a shard cut short while fit runs killed it with "Bus error" (exit 135), no
// message and no stop checkpoint (the shards are mapped; their CRC is checked at open). Now the read
// past the new end is caught, the step in flight is dropped, the last complete step is checkpointed,
// and fit exits 2 naming the shard.
TEST_F(BadShard, AShardCutShortUnderARunningFitStopsCleanlyNotWithABusError) {
  const std::vector<std::string> argv = {kLmtrain, "fit", "--data", w("shards"), "--config", w("run.json"), "--preset",
                                         "tiny", "--tokenizer", w("tok"), "--out", w("new"), "--set",
                                         "debug.slow_forward_ms=300", "--threads", "2", "-q"};
  const pid_t pid = spawn(argv, logs(), "shrink");
  ASSERT_TRUE(wait_for([&] { return !slurp(ws() / "new" / "metrics.jsonl").empty(); }, 180)) << slurp(logs() / "shrink.err");
  std::vector<fs::path> cut;
  for (const auto& e : fs::directory_iterator(ws() / "shards"))
    if (e.path().filename().string().find(".train.") != std::string::npos) cut.push_back(e.path());
  for (const auto& p : cut) fs::resize_file(p, 0);  // as a sync tool or a full disk might leave them
  const int rc = wait_exit(pid);
  const std::string err = slurp(logs() / "shrink.err");
  EXPECT_EQ(rc, 2) << err;
  EXPECT_NE(err.find(".train."), std::string::npos) << err;
  EXPECT_NE(err.find("the file shrank while fit was reading it"), std::string::npos) << err;
  EXPECT_NE(err.find("with a checkpoint"), std::string::npos) << err;
  EXPECT_FALSE(latest_of("new").empty()) << "a stop checkpoint";
}

TEST_F(BadShard, OtherTokenizer) {
  copy_in("tok_other");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--tokenizer", w("tok_other"), "--out", w("new")}), "tokenizer", "lmtrain prepare");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new"));
}

// Issue 21 point 7: the tokenizer (same spm.model, same hash) says the old framing text + eos (a
// tokenizer.json without "framing") while the shards hold bos + text + eos: fit refuses, naming
// both files and the fix, before it writes anything.
TEST_F(BadShard, TokenizerOfAnotherFraming) {
  auto meta = lm::read_json_file(w("tok/tokenizer.json"));
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_TRUE(meta->contains("framing"));
  meta->erase("framing");
  ASSERT_TRUE(lm::write_json_file(w("tok/tokenizer.json"), *meta).ok());
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--out", w("new")}), "shards/manifest.json", "framing", "bos + text + eos",
                   "tok/tokenizer.json says text + eos", "re-run 'lmtrain prepare");
  expect_unchanged(before, ws());
  EXPECT_FALSE(fs::exists(ws() / "new"));
}

// ---- checkpoints (lmtrain fit --resume, lmeval) ------------------------------------------------

class BadCheckpoint : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("run");
    ckpt_ = ws() / "run" / "checkpoints" / latest_of("run");
    ASSERT_TRUE(fs::exists(ckpt_ / "model.safetensors")) << ckpt_;
  }
  Result resume(std::vector<std::string> extra = {}) {
    std::vector<std::string> v = {"--out", w("run"), "--resume"};
    v.insert(v.end(), extra.begin(), extra.end());
    return fit(v);
  }
  Result nll() { return lmeval({"nll", "--run", w("run"), "--data", w("shards"), "--max-tokens", "256", "--out", w("nll.json")}); }
  fs::path ckpt_;
};

// Issue 40 items 2-3: a damaged newest checkpoint (a file missing, cut short, one bit flipped, an
// edited trainer.json that is still valid JSON) is caught by its manifest. lmeval and export refuse
// it naming the file; fit --resume skips it saying which file and why, sets it aside untouched as
// step-N.damaged, and continues from the newest checkpoint that verifies (step 3), ending
// bit-identical to the unbroken run. Before: a missing or truncated file exited 2 for good (a restart
// loop stuck) with a hint naming --step, which fit does not have; a flipped bit or an edited
// trainer.json loaded silently and the run went on from other weights.
TEST_F(BadCheckpoint, DamagedLatestIsSkippedNamedSetAsideAndTheRunEndsExact) {
  struct Damage {
    const char* file;
    std::function<std::string(std::string)> change;  // nullptr: the file is removed
    const char* said;
  };
  const std::vector<Damage> cases = {
      {"model.safetensors", nullptr, "missing model.safetensors"},
      {"model.safetensors", [](std::string b) { b[b.size() / 2] ^= 0x01; return b; }, "checksum mismatch"},
      {"optimizer.safetensors", [](std::string b) { return b.substr(0, b.size() / 2); }, "but manifest.json records"},
      {"trainer.json", [](std::string b) {
         Json t = Json::parse(b);
         t["tokens"] = t["tokens"].get<int64_t>() + 64;  // the same number of digits: the size stays
         return t.dump(2) + "\n";
       }, "checksum mismatch"},
  };
  const std::string ref9 = slurp(shared_ws() / "ref" / "checkpoints" / "step-00000009" / "model.safetensors");
  for (size_t i = 0; i < cases.size(); ++i) {
    const Damage& d = cases[i];
    SCOPED_TRACE(std::string(d.file) + " " + d.said);
    const std::string name = "run" + std::to_string(i);
    fs::copy(shared_ws() / "run", ws() / name, fs::copy_options::recursive);
    const fs::path six = ws() / name / "checkpoints" / "step-00000006";
    std::string damaged;
    if (d.change) {
      damaged = d.change(slurp(six / d.file));
      spit(six / d.file, damaged);
    } else {
      fs::remove(six / d.file);
    }
    // Readers refuse the damaged checkpoint, naming the file (and --step to read another).
    const Result read = std::string(d.file) == "trainer.json"
                            ? lmtrain({"export", "--run", w(name), "--out", w(name + "_hf")})
                            : lmeval({"nll", "--run", w(name), "--data", w("shards"), "--max-tokens", "256", "--out",
                                      w(name + "_nll.json")});
    if (std::string(d.file) != "optimizer.safetensors") EXPECT_BAD_INPUT(read, d.file, d.said, "--step");
    Result r = fit({"--out", w(name), "--resume"});
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const std::string& want : {std::string("resume: skipped step-00000006: "), std::string(d.file), std::string(d.said),
                                    std::string("set aside as step-00000006.damaged (nothing deleted)")})
      EXPECT_NE(r.err.find(want), std::string::npos) << "want '" << want << "' in: " << r.err;
    EXPECT_EQ(slurp(ws() / name / "checkpoints" / "step-00000009" / "model.safetensors"), ref9);
    EXPECT_EQ(latest_of(name), "step-00000009");
    if (d.change) EXPECT_EQ(slurp(ws() / name / "checkpoints" / "step-00000006.damaged" / d.file), damaged);
    EXPECT_TRUE(fs::exists(ws() / name / "checkpoints" / "step-00000006"));  // rewritten by the resumed run
  }
}

// Issue 40 item 4: `latest` deleted with checkpoints 3 and 6 there. Before: "no checkpoint yet;
// starting the run from step 0", metrics.jsonl cut to nothing, everything retrained. Now the resume
// takes step 6 (the newest that verifies) and says why, and metrics.jsonl keeps steps 1-6.
TEST_F(BadCheckpoint, MissingLatestNeverRestartsFromZero) {
  fs::remove(ws() / "run" / "latest");
  const std::string metrics = slurp(ws() / "run" / "metrics.jsonl");
  Result r = fit({"--out", w("run"), "--resume"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("latest is missing; resuming from the newest checkpoint that verifies, step-00000006 (not from "
                       "step 0)"), std::string::npos) << r.err;
  const std::string after = slurp(ws() / "run" / "metrics.jsonl");
  EXPECT_EQ(after.substr(0, metrics.size()), metrics) << "steps 1-6 kept";
  std::vector<int64_t> steps;
  for (const auto& line : absl::StrSplit(after, '\n', absl::SkipEmpty())) steps.push_back(Json::parse(line)["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(slurp(ws() / "run" / "checkpoints" / "step-00000009" / "model.safetensors"),
            slurp(shared_ws() / "ref" / "checkpoints" / "step-00000009" / "model.safetensors"));
}

// Every checkpoint damaged: fit --resume exits 2 naming each and why, and changes nothing (it
// does not start over from step 0 over them).
TEST_F(BadCheckpoint, NoCheckpointThatVerifiesIsRefusedAndNothingChanges) {
  for (const char* step : {"step-00000003", "step-00000006"}) {
    const fs::path f = ws() / "run" / "checkpoints" / step / "model.safetensors";
    std::string b = slurp(f);
    b[100] ^= 0x40;
    spit(f, b);
  }
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--out", w("run"), "--resume"}), "no checkpoint of this run verifies",
                   "step-00000006: " + (ws() / "run" / "checkpoints" / "step-00000006" / "model.safetensors").string() +
                       ": checksum mismatch",
                   "step-00000003: ", "not restarted from step 0", "--force");
  expect_unchanged(before, ws());
}

TEST_F(BadCheckpoint, FromAnotherPreset) {
  // Resuming the tiny run as `small`.
  Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--out", w("run"), "--resume", "--preset", "small"}), "model.d_model (--preset small",
                   "--resume continues the run with its own config.json");
  expect_unchanged(before, ws());
  // A checkpoint folder of a `small` run (intact: its manifest verifies) dropped into the tiny run
  // under its own step's name, the only checkpoint left, with `latest` naming it.
  const std::string other_name = slurp(shared_ws() / "other" / "latest").substr(0, 13);
  fs::remove_all(ws() / "run" / "checkpoints");
  fs::create_directories(ws() / "run" / "checkpoints");
  fs::copy(shared_ws() / "other" / "checkpoints" / other_name, ws() / "run" / "checkpoints" / other_name,
           fs::copy_options::recursive);
  spit(ws() / "run" / "latest", other_name + "\n");
  before = snapshot(ws());
  EXPECT_BAD_INPUT(resume(), "another model config");
  expect_unchanged(before, ws());
  EXPECT_BAD_INPUT(nll(), "model.safetensors", "another preset");
  expect_unchanged(before, ws());
}

// ---- the run folder -------------------------------------------------------------------------

TEST_F(BadInput, OutputFolderExistsIsRefusedWithoutResumeOrForce) {
  copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("run");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(fit({"--out", w("run")}), w("run"), "already exists", "--resume", "--force");
  expect_unchanged(before, ws());
  // And the opposite: --resume where there is no run.
  EXPECT_BAD_INPUT(fit({"--out", w("none"), "--resume"}), "no run to resume");
  expect_unchanged(before, ws());
}

// A read-only --out names the real cause (issue 40 item 8: it said "create failed: No such file or
// directory"). Root ignores permission bits, so the folder is a read-only bind mount in a private
// mount namespace (unshare -m); skipped where that is not allowed.
TEST_F(BadInput, ReadOnlyOutNamesTheRealCause) {
  copy_in("shards"); copy_in("tok"); copy_in("run.json");
  const std::string ro = w("ro");
  fs::create_directories(ro);
  const std::string mount = "mount --bind " + ro + " " + ro + " && mount -o remount,bind,ro " + ro;
  if (run({"/usr/bin/unshare", "-m", "/bin/sh", "-c", mount + " && ! touch " + ro + "/probe 2>/dev/null"}, logs()).rc != 0)
    GTEST_SKIP() << "no read-only bind mount here (unshare -m needs root and mount namespaces)";
  std::string cmd = mount + " && exec " + kLmtrain;
  for (const char* a : {"fit", "--preset", "tiny", "--threads", "2", "-q"}) cmd += std::string(" ") + a;
  for (const std::string& a : {std::string("--data"), w("shards"), std::string("--config"), w("run.json"),
                               std::string("--tokenizer"), w("tok"), std::string("--out"), ro + "/run"})
    cmd += " " + a;
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(run({"/usr/bin/unshare", "-m", "/bin/sh", "-c", cmd}, logs()), ro + "/run",
                   "cannot create the run folder: Read-only file system", "--out");
  expect_unchanged(before, ws());
}

// ---- resume = continue the same run (issue 21) ---------------------------------------------------

// The step-9 weights of the uninterrupted reference run.
std::string ref_weights() {
  return slurp(shared_ws() / "ref" / "checkpoints" / "step-00000009" / "model.safetensors");
}

// `fit --out RUN --resume` alone: the run's own preset, config and shards (today it re-applied the
// defaults: preset small, 200 steps, lr 3e-3), bit-identical to the run that was never stopped.
TEST_F(BadInput, ResumeWithNoOtherFlagsContinuesTheRunAsStarted) {
  copy_in("shards"); copy_in("tok"); copy_in("run.json");
  ASSERT_EQ(fit({"--out", w("run"), "--stop-at-step", "6"}).rc, 0);
  Result r = lmtrain({"fit", "--out", w("run"), "--resume"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(latest_of("run"), "step-00000009");
  EXPECT_EQ(slurp(ws() / "run" / "checkpoints" / "step-00000009" / "model.safetensors"), ref_weights());
  const Json cfg = Json::parse(slurp(ws() / "run" / "config.json"));
  EXPECT_EQ(cfg["train"]["steps"], 9);
  EXPECT_EQ(cfg["model"]["preset"], "tiny");
}

// Flags that would change the run are refused, each named with the run's value and the new one.
TEST_F(BadCheckpoint, ResumeRefusesFlagsThatChangeTheRunNamingEach) {
  const Snapshot before = snapshot(ws());
  Result r = resume({"--lr", "0.01", "--micro-batch", "4"});
  EXPECT_BAD_INPUT(r, "train.optimizer.lr (--lr", "the run has 0.003, now 0.01", "train.batch.micro_batch (--micro-batch",
                   "the run has 2, now 4", "--resume continues the run with its own config.json");
  expect_unchanged(before, ws());
}

// A finished run says so and exits 0 (today: "trained 9 steps ... 0 tok/s, final train loss
// 0.0000"); fewer --steps than done is refused.
TEST_F(BadInput, ResumeOfAFinishedRunSaysSoAndFewerStepsAreRefused) {
  copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("ref");
  const Snapshot before = snapshot(ws());
  Result r = fit({"--out", w("ref"), "--resume"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("the run is finished (step 9 of 9); nothing to train"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("trained"), std::string::npos) << r.out;
  expect_unchanged(before, ws());
  EXPECT_BAD_INPUT(fit({"--out", w("ref"), "--resume", "--steps", "5"}), "train.steps 5 is fewer than the 9 steps");
  expect_unchanged(before, ws());
}

// Killed before the first checkpoint: --resume starts from step 0 (today both --resume and a
// plain start refused, each pointing at the other).
TEST_F(BadInput, ResumeWithoutACheckpointStartsFromStepZero) {
  copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("run");
  fs::remove_all(ws() / "run" / "checkpoints");
  fs::remove(ws() / "run" / "latest");
  Result r = fit({"--out", w("run"), "--resume"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(slurp(ws() / "run" / "checkpoints" / "step-00000009" / "model.safetensors"), ref_weights());
}

// Continued pretraining on other shards is the named option --allow-new-data; without it the
// shards must be the run's own (found by content: a moved copy is fine).
TEST_F(BadInput, ResumeOnNewShardsNeedsAllowNewData) {
  copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("ref");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "line " + std::to_string(i) + " of another corpus, with more words in it\n";
  const std::string corpus = corpus_with(ws() / "corpus2", "more.txt", text.c_str());
  ASSERT_EQ(lmtrain({"prepare", "--corpus", corpus, "--tokenizer", w("tok"), "--out", w("shards2"),
                     "--val-fraction", "0.1"}).rc, 0);
  const std::vector<std::string> cont = {"fit", "--out", w("ref"), "--resume", "--data", w("shards2"), "--steps", "12"};
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(lmtrain(cont), "not the shards this run trains on", "--allow-new-data");
  expect_unchanged(before, ws());
  std::vector<std::string> allowed = cont;
  allowed.push_back("--allow-new-data");
  Result r = lmtrain(allowed);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(latest_of("ref"), "step-00000012");
  const Json cfg = Json::parse(slurp(ws() / "ref" / "config.json"));
  EXPECT_EQ(cfg["train"]["steps"], 12);
  EXPECT_EQ(cfg["data"]["shards"], w("shards2"));
  EXPECT_EQ(cfg["data"]["earlier_shards"].size(), 1u) << cfg.dump();
}

// ---- no silent overwrite (issue 21) ----------------------------------------------------------

TEST_F(BadInput, TokenizerAndPrepareRefuseAnExistingOutputWithoutForce) {
  copy_in("tok"); copy_in("shards");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(lmtrain({"tokenizer", "--corpus", kSampleCorpus, "--vocab-size", "400", "--out", w("tok")}),
                   w("tok") + ": already holds a tokenizer", "--force");
  expect_unchanged(before, ws());
  EXPECT_BAD_INPUT(lmtrain({"prepare", "--corpus", kSampleCorpus, "--tokenizer", w("tok"), "--out", w("shards")}),
                   w("shards") + ": already holds shards", "--force");
  expect_unchanged(before, ws());
}

// ---- disk full during a checkpoint write ---------------------------------------------------------

// The run stopped at step 6 resumes towards step 9; the step-9 checkpoint cannot be written.
// Checked: exit 2, a message naming the file and the cause, step 6 untouched and still `latest`, no
// partial folder left; then with room again, --resume finishes bit-identical to the unbroken run.
class DiskFull : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("run");
  }
  void expect_previous_intact_and_resume_exact(const Snapshot& ckpt6, const fs::path& run) {
    EXPECT_EQ(slurp(run / "latest"), "step-00000006\n");
    EXPECT_EQ(snapshot(run / "checkpoints" / "step-00000006"), ckpt6);
    for (const auto& e : fs::directory_iterator(run / "checkpoints"))
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "partial checkpoint left behind";
    EXPECT_FALSE(fs::exists(run / "checkpoints" / "step-00000009"));
    Result again = fit({"--out", run.string(), "--resume"});
    ASSERT_EQ(again.rc, 0) << again.err;
    for (const char* f : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_EQ(slurp(run / "checkpoints" / "step-00000009" / f),
                slurp(shared_ws() / "ref" / "checkpoints" / "step-00000009" / f))
          << f << " differs from the uninterrupted run";
  }
};

TEST_F(DiskFull, FileSizeLimitDuringCheckpointWrite) {
  const fs::path run = ws() / "run";
  const Snapshot ckpt6 = snapshot(run / "checkpoints" / "step-00000006");
  const Snapshot before = snapshot(ws());
  // Below the model file (~600 KB for tiny), above everything else the resume writes.
  const auto model_size = fs::file_size(run / "checkpoints" / "step-00000006" / "model.safetensors");
  Result r = fit({"--out", run.string(), "--resume"}, model_size / 2);
  EXPECT_BAD_INPUT(r, "step-00000009.tmp.", "/model.safetensors", "File too large", "step-00000006 (untouched");
  // metrics.jsonl grew by the lines of steps 7-9 (cut back on resume); config.json records where
  // the shards now are (the workspace was built elsewhere and copied); the resume's own TensorBoard
  // event file was added (earlier ones untouched); nothing else changed.
  Snapshot b = before, now = snapshot(ws());
  for (const char* f : {"run/metrics.jsonl", "run/config.json"}) {
    b.erase(f);
    now.erase(f);
  }
  for (auto it = now.begin(); it != now.end();)
    it = it->first.rfind("run/tensorboard/", 0) == 0 && !b.count(it->first) ? now.erase(it) : std::next(it);
  EXPECT_EQ(b, now);
  expect_previous_intact_and_resume_exact(ckpt6, run);
}

// A real ENOSPC on a tmpfs just big enough for the run and one model file, mounted in a private
// mount namespace (unshare -Urm: needs unprivileged user namespaces or root; skipped without).
TEST_F(DiskFull, NoSpaceOnTmpfsDuringCheckpointWrite) {
  if (std::system("unshare -Urm true >/dev/null 2>&1") != 0) GTEST_SKIP() << "unshare -Urm not permitted here";
  const fs::path run = ws() / "run";
  const Snapshot ckpt6 = snapshot(run / "checkpoints" / "step-00000006");
  uintmax_t used = 0;
  for (const auto& e : fs::recursive_directory_iterator(run))
    if (e.is_regular_file()) used += (e.file_size() + 4095) / 4096 * 4096 + 4096;
  const auto model_size = fs::file_size(run / "checkpoints" / "step-00000006" / "model.safetensors");
  // Room for the copy, metrics lines, and model.safetensors of step 9 but not its optimizer file.
  const uintmax_t size_kb = (used + model_size + 256 * 1024) / 1024;
  const fs::path mnt = root_ / "mnt";
  fs::create_directories(mnt);
  fs::create_directories(logs());
  const std::string script = root_.string() + "/enospc.sh";
  spit(script, "set -u\n"
               "mount -t tmpfs -o size=" + std::to_string(size_kb) + "k tmpfs '" + mnt.string() + "' || exit 99\n"
               "cp -a '" + run.string() + "' '" + mnt.string() + "/run' || exit 98\n"
               "'" + kLmtrain + "' fit --data '" + w("shards") + "' --preset tiny --config '" + w("run.json") +
               "' --out '" + mnt.string() + "/run' --resume --threads 2 -q 2> '" + logs().string() + "/enospc.err'\n"
               "echo $? > '" + logs().string() + "/enospc.rc'\n"
               "df -k '" + mnt.string() + "' > '" + logs().string() + "/enospc.df'\n"
               // Copy the state out (the mount vanishes with the namespace) for the checks below.
               "rm -rf '" + root_.string() + "/after' && cp -a '" + mnt.string() + "/run' '" + root_.string() + "/after'\n");
  const int rc = std::system(("unshare -Urm sh " + script).c_str());
  ASSERT_EQ(rc, 0) << "namespace script failed: " << rc;
  Result r;
  r.rc = std::atoi(slurp(logs() / "enospc.rc").c_str());
  r.err = slurp(logs() / "enospc.err");
  std::fprintf(stderr, "tmpfs %ju KiB: exit %d\n%s%s", size_kb, r.rc, r.err.c_str(), slurp(logs() / "enospc.df").c_str());
  EXPECT_BAD_INPUT(r, "step-00000009.tmp.", "No space left on device", "step-00000006 (untouched");
  expect_previous_intact_and_resume_exact(ckpt6, root_ / "after");
}

// ---- numerical faults at the CLI -------------------------------------------------------------

TEST_F(BadInput, NanStopsWithStepParameterAndLastCheckpoint) {
  copy_in("shards"); copy_in("tok"); copy_in("run");
  spit(ws() / "nan.json", R"({"train": {"steps": 9, "batch": {"micro_batch": 2, "seq_len": 32},
    "schedule": {"warmup_steps": 2}, "logging": {"interval": 1}, "checkpoint": {"interval": 3, "keep_last": 5},
    "eval": {"interval": 0}, "debug": {"inject_nan_step": 7}}})");
  const Snapshot ckpt6 = snapshot(ws() / "run" / "checkpoints" / "step-00000006");
  Result r = lmtrain({"fit", "--data", w("shards"), "--preset", "tiny", "--config", w("nan.json"), "--out", w("run"),
                      "--resume"});
  // A numerical fault is a runtime failure (exit 1), not bad input: the data and config were valid.
  EXPECT_EQ(r.rc, 1) << r.err;
  for (const char* n : {"step 8: non-finite gradient", "model.layers.0.mlp.down_proj.weight", "step-00000006"})
    EXPECT_NE(r.err.find(n), std::string::npos) << n << " in " << r.err;
  EXPECT_EQ(latest_of("run"), "step-00000006");
  EXPECT_EQ(snapshot(ws() / "run" / "checkpoints" / "step-00000006"), ckpt6);
}

// ---- multiple-choice data (lmeval mc) --------------------------------------------------------

class BadMcData : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("run"); copy_in("tok");
  }
  Result mc(const std::string& task) {
    return lmeval({"mc", "--run", w("run"), "--tasks", task, "--data-dir", w("bench"), "--out", w("mc.json")});
  }
};

TEST_F(BadMcData, CopaLineMissingAField) {
  spit(ws() / "bench" / "copa" / "val.jsonl",
       R"({"premise": "The man fell.", "question": "cause", "choice1": "He slipped.", "choice2": "He sang.", "label": 0})"
       "\n"
       R"({"premise": "The sun rose.", "question": "effect", "choice1": "It got light.", "label": 0})"
       "\n");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(mc("copa"), "copa/val.jsonl:2", "choice2");
  expect_unchanged(before, ws());
}

TEST_F(BadMcData, CopaLabelOfWrongType) {
  spit(ws() / "bench" / "copa" / "val.jsonl",
       R"({"premise": "The man fell.", "question": "cause", "choice1": "He slipped.", "choice2": "He sang.", "label": "first"})"
       "\n");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(mc("copa"), "copa/val.jsonl:1");
  expect_unchanged(before, ws());
}

TEST_F(BadMcData, PiqaLabelsNotIntegersOrLineNotJson) {
  spit(ws() / "bench" / "piqa" / "valid.jsonl", R"({"goal": "open a jar", "sol1": "twist", "sol2": "kick"})" "\n");
  spit(ws() / "bench" / "piqa" / "valid-labels.lst", "zero\n");
  Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(mc("piqa"), "valid-labels.lst:1", "integer");
  expect_unchanged(before, ws());
  spit(ws() / "bench" / "piqa" / "valid-labels.lst", "0\n");
  spit(ws() / "bench" / "piqa" / "valid.jsonl", "goal,sol1,sol2\n");
  before = snapshot(ws());
  EXPECT_BAD_INPUT(mc("piqa"), "valid.jsonl:1");
  expect_unchanged(before, ws());
}

TEST_F(BadMcData, ArcAnswerKeyNotAChoice) {
  spit(ws() / "bench" / "arc_easy" / "ARC-Easy-Test.jsonl",
       R"({"id": "q1", "question": {"stem": "Which is wet?", "choices": [{"text": "water", "label": "A"}, {"text": "sand", "label": "B"}]}, "answerKey": "E"})"
       "\n");
  const Snapshot before = snapshot(ws());
  EXPECT_BAD_INPUT(mc("arc_easy"), "ARC-Easy-Test.jsonl:1", "answerKey 'E'");
  expect_unchanged(before, ws());
}

}  // namespace
