// The run folder's layout, its create/resume/force policy and the one metrics.jsonl reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/file.h"
#include "core/run_folder.h"

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

}  // namespace
}  // namespace lm
