// The run folder's layout, its create/resume/force policy and the one metrics.jsonl reader.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "core/checkpoint_manifest.h"
#include "core/config.h"
#include "core/file.h"
#include "core/run_folder.h"
#include "core/run_lock.h"

namespace lm {
namespace {
namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_run_folder_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  return p;
}

TEST(RunFolderLayout, LayoutNamesEveryArtefact) {
  const RunFolder r("runs/x");
  EXPECT_EQ(r.config(), "runs/x/config.json");
  EXPECT_EQ(r.tokenizer(), "runs/x/tokenizer");
  EXPECT_EQ(r.metrics(), "runs/x/metrics.jsonl");
  EXPECT_EQ(r.checkpoint(100), "runs/x/checkpoints/step-00000100");
  EXPECT_EQ(r.latest(), "runs/x/latest");
  EXPECT_EQ(r.eval(), "runs/x/eval");
  EXPECT_EQ(r.plots(), "runs/x/plots");
  EXPECT_EQ(r.report(), "runs/x/report.html");
  EXPECT_EQ(RunFolder("runs/x/").config(), "runs/x/config.json");  // a trailing slash adds none
  EXPECT_EQ(RunFolder::step_name(7), "step-00000007");
  EXPECT_EQ(*RunFolder::parse_step_name("step-00000042"), 42);
  auto bad = RunFolder::parse_step_name("final");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("final: folder name is not step-<N>"), std::string::npos) << bad.status();
}

TEST(RunFolderLayout, NeverOverwritesARunByAccident) {
  const fs::path dir = fresh("policy");
  const RunFolder r(dir.string());
  auto st = r.open(/*resume=*/true, /*force=*/false);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("no run to resume"), std::string::npos) << st;
  ASSERT_TRUE(r.open(false, false).ok());
  ASSERT_TRUE(write_file_atomic(r.config(), "{}").ok());
  ASSERT_TRUE(write_file_atomic(r.metrics(), "{\"step\": 1}\n").ok());
  ASSERT_TRUE(write_file_atomic(r.latest(), "step-00000001\n").ok());
  fs::create_directories(r.checkpoint(1));
  st = r.open(false, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  EXPECT_NE(st.message().find("--resume, or pass --force"), std::string::npos) << st;
  ASSERT_TRUE(r.open(true, false).ok());  // resume keeps everything
  EXPECT_TRUE(fs::exists(r.metrics()) && fs::exists(r.checkpoint(1)));
  EXPECT_EQ(*r.latest_name(), "step-00000001");
  ASSERT_TRUE(r.open(false, true).ok());  // force starts over: old checkpoints, latest, metrics go
  EXPECT_FALSE(fs::exists(r.metrics()) || fs::exists(r.checkpoints()) || fs::exists(r.latest()));
  EXPECT_EQ(r.latest_name().status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir.parent_path());
}

TEST(RunFolderLayout, MetricsReaderStopsAtATornLine) {
  const fs::path dir = fresh("metrics");
  fs::create_directories(dir);
  const RunFolder r(dir.string());
  EXPECT_TRUE(read_metrics(r.metrics())->empty());  // no file yet: no rows
  ASSERT_TRUE(write_file_atomic(r.metrics(), "{\"step\": 1, \"loss\": 6.5}\n\n{\"step\": 2}\n{\"step\": 3, \"lo").ok());
  auto rows = read_metrics(r.metrics());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1]["step"], 2);
  EXPECT_EQ((*rows)[0]["loss"], 6.5);
  fs::remove_all(dir.parent_path());
}

// fit --resume auto's view of a folder (issue 30 item 1): none or what a start leaves before its
// config.json (the tokenizer copy, config.json's temp file) is no run yet; config.json is a run;
// anything else is refused by name.
TEST(RunFolderLayout, ContentsTellNoRunYetFromARunFromSomethingElse) {
  const fs::path dir = fresh("contents");
  const RunFolder r(dir.string());
  EXPECT_EQ(r.contents().holds, RunFolder::Holds::kNothing);  // no folder
  fs::create_directories(dir);
  EXPECT_EQ(r.contents().holds, RunFolder::Holds::kNothing);  // empty
  fs::create_directories(r.tokenizer());
  ASSERT_TRUE(write_file_atomic(r.tokenizer() + "/spm.model", "x").ok());
  ASSERT_TRUE(write_file_atomic(r.config() + ".tmp.123", "{\"mod").ok());  // killed mid-write
  ASSERT_TRUE(write_file_atomic((dir / kRunLockName).string(), "{\"pid\": 1}").ok());  // a kill leaves the lock file
  EXPECT_EQ(r.contents().holds, RunFolder::Holds::kNothing);
  ASSERT_TRUE(write_file_atomic((dir / "notes.txt").string(), "mine").ok());
  fs::create_directories(dir / "shards");
  const RunFolder::Contents other = r.contents();
  EXPECT_EQ(other.holds, RunFolder::Holds::kOther);
  EXPECT_EQ(other.other, (std::vector<std::string>{"notes.txt", "shards/"}));
  ASSERT_TRUE(write_file_atomic(r.config(), "{}").ok());
  EXPECT_EQ(r.contents().holds, RunFolder::Holds::kRun);
  const fs::path file = fresh("a_file");
  ASSERT_TRUE(write_file_atomic(file.string(), "x").ok());
  EXPECT_EQ(RunFolder(file.string()).contents().holds, RunFolder::Holds::kOther);
  fs::remove_all(dir.parent_path());
}

// Complete checkpoints only (export --step lists them), and the tokenizer copy against the hash
// config.json records (issue 30 items 12, 13).
TEST(RunFolderLayout, CheckpointStepsAndTokenizerHash) {
  const fs::path dir = fresh("steps");
  const RunFolder r(dir.string());
  EXPECT_TRUE(r.checkpoint_steps().empty());
  for (int64_t step : {20, 5, 10}) {
    fs::create_directories(r.checkpoint(step));
    ASSERT_TRUE(write_file_atomic(r.checkpoint(step) + "/model.safetensors", "w").ok());
    ASSERT_TRUE(write_file_atomic(r.checkpoint(step) + "/trainer.json", "{}").ok());
  }
  fs::remove(r.checkpoint(10) + "/trainer.json");  // incomplete
  fs::create_directories(r.checkpoints() + "/step-00000030.tmp");
  EXPECT_EQ(r.checkpoint_steps(), (std::vector<int64_t>{5, 20}));

  fs::create_directories(r.tokenizer());
  ASSERT_TRUE(write_file_atomic(r.tokenizer() + "/spm.model", "model bytes").ok());
  const std::string hash = hex64(fnv1a64("model bytes", 11));
  ASSERT_TRUE(write_file_atomic(r.config(), "{\"tokenizer_hash\": \"" + hash + "\"}").ok());
  EXPECT_TRUE(r.check_tokenizer().ok()) << r.check_tokenizer();
  ASSERT_TRUE(write_file_atomic(r.tokenizer() + "/spm.model", "other bytes").ok());
  const absl::Status st = r.check_tokenizer();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find(hash), std::string::npos) << st;
  EXPECT_NE(st.message().find(hex64(fnv1a64("other bytes", 11))), std::string::npos) << st;
  EXPECT_NE(st.message().find("spm.model"), std::string::npos) << st;
  EXPECT_NE(st.message().find("config.json"), std::string::npos) << st;
  fs::remove_all(dir.parent_path());
}

// Issue 40 item 1: two processes on one run folder. A child holds the lock; the parent is refused
// (Unavailable: a restart loop retries) with the child's pid and host named; once the child is
// killed (-9: no clean-up of its own), the lock is free again and the parent takes it over, seeing
// what the dead holder had written. Releasing removes the file, and the folder it made.
TEST(RunLock, OneHolderAtATimeAndADeadHoldersLockIsTakenOver) {
  const fs::path dir = fresh("lock") / "run";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto lock = RunLock::acquire(dir.string());
    const char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    for (;;) pause();
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto second = RunLock::acquire(dir.string());
  kill(child, SIGKILL);  // before any ASSERT can return: a paused child would outlive the test
  waitpid(child, nullptr, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  const std::string msg(second.status().message());
  EXPECT_NE(msg.find("another process is writing this run (pid " + std::to_string(child) + " on host " + host), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  ASSERT_TRUE(fs::exists(dir / kRunLockName));  // a kill -9 leaves the file: only informative
  {
    auto third = RunLock::acquire(dir.string());
    ASSERT_TRUE(third.ok()) << third.status();
    EXPECT_EQ(third->previous_holder().value("pid", 0), child);
    const Json mine = Json::parse(*read_file((dir / kRunLockName).string()));
    EXPECT_EQ(mine["pid"], getpid());
    EXPECT_EQ(mine["host"], host);
  }
  EXPECT_FALSE(fs::exists(dir / kRunLockName));  // released
  EXPECT_TRUE(fs::exists(dir));                  // the child made the folder: not this lock's to remove
  const fs::path fresh_dir = dir.parent_path() / "new";
  { ASSERT_TRUE(RunLock::acquire(fresh_dir.string()).ok()); }
  EXPECT_FALSE(fs::exists(fresh_dir));  // made by the lock, empty: removed (a refused start leaves nothing)
  fs::remove_all(dir.parent_path());
}

// Issue 40 item 2: each file's size and CRC-32 in manifest.json; one flipped bit, a truncation, an
// edit and a missing file are each named; a folder from before manifests reads as unverified.
TEST(CheckpointManifest, FlippedBitTruncationEditAndMissingFileAreNamed) {
  const fs::path dir = fresh("manifest");
  fs::create_directories(dir);
  const std::string weights(100000, '\x5a');
  ASSERT_TRUE(write_file_atomic((dir / "model.safetensors").string(), weights).ok());
  ASSERT_TRUE(write_file_atomic((dir / "trainer.json").string(), "{\"step\": 6}").ok());
  bool unverified = true;
  EXPECT_TRUE(verify_checkpoint(dir.string(), {"model.safetensors"}, &unverified).ok());
  EXPECT_TRUE(unverified);  // no manifest yet
  ASSERT_TRUE(write_checkpoint_manifest(dir.string()).ok());
  EXPECT_TRUE(verify_checkpoint(dir.string(), {}, &unverified).ok());
  EXPECT_FALSE(unverified);
  auto expect_named = [&](const std::string& file, const std::string& what) {
    const absl::Status st = verify_checkpoint(dir.string());
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find(file), std::string::npos) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  std::string flipped = weights;
  flipped[54321] ^= 0x04;  // one bit
  ASSERT_TRUE(write_file_atomic((dir / "model.safetensors").string(), flipped).ok());
  expect_named("model.safetensors", "checksum mismatch");
  ASSERT_TRUE(write_file_atomic((dir / "model.safetensors").string(), weights.substr(0, 5000)).ok());
  expect_named("model.safetensors", "5000 bytes, but manifest.json records 100000");
  ASSERT_TRUE(write_file_atomic((dir / "model.safetensors").string(), weights).ok());
  ASSERT_TRUE(write_file_atomic((dir / "trainer.json").string(), "{\"step\": 9}").ok());  // still valid JSON
  expect_named("trainer.json", "checksum mismatch");
  fs::remove(dir / "trainer.json");
  expect_named("trainer.json", "missing");
  fs::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace lm