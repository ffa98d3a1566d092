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

}  // namespace
}  // namespace lm
