// TensorBoard's own reader (the Python `tensorboard` package, a test-only client; label clients)
// on the event files a real run writes beside metrics.jsonl, through a stop and a resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "train/trainer.h"
#include "tests/train/synthetic_source.h"

namespace lm::train {
namespace {
namespace fs = std::filesystem;

bool have_tensorboard() {
  return std::system((std::string(LM_TEST_PYTHON) + " -c 'import tensorboard' >/dev/null 2>&1").c_str()) == 0;
}

TEST(TensorBoardClient, ReadsTheRunsScalarsThroughAResume) {
  if (!have_tensorboard())
    GTEST_SKIP() << LM_TEST_PYTHON << " has no tensorboard (pip install -r scripts/requirements-clients.txt)";
  init_output(/*quiet=*/true);
  const fs::path dir = fs::temp_directory_path() / ("lm_tb_client_" + std::to_string(getpid()));
  fs::remove_all(dir);
  FitRequest r;
  r.run_dir = dir.string();
  r.model = *model::preset("tiny");
  r.train.steps = 20;
  r.train.batch.micro_batch = 2;
  r.train.batch.seq_len = 16;
  r.train.logging.interval = 5;
  r.train.eval.interval = 0;
  r.train.checkpoint.interval = 10;
  r.tokenizer_hash = "tok-test";
  testing::SyntheticSource src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
  ASSERT_TRUE(fit(r, src, {}).ok());
  // A crash before step 20's checkpoint was committed: `latest` still names step 10, while the
  // first event file already holds steps 15 and 20. The resumed run logs them again; TensorBoard
  // must show each step once (the restart mark drops the first file's points from step 10 on).
  const RunFolder run(r.run_dir);
  fs::remove_all(run.checkpoint(20));
  ASSERT_TRUE(write_file_atomic(run.latest(), RunFolder::step_name(10)).ok());
  r.resume = true;
  testing::SyntheticSource src2(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size);
  ASSERT_TRUE(fit(r, src2, {}).ok());

  // Every loss of metrics.jsonl, at its step, is what TensorBoard shows; nothing else.
  auto rows = read_metrics(RunFolder(r.run_dir).metrics());
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::string want = "loss=", lr = "lr=";
  for (const auto& row : *rows) {
    const int64_t step = row["step"].get<int64_t>();
    absl::StrAppend(&want, want.back() == '=' ? "" : ",", step, ":", row["loss"].get<double>());
    absl::StrAppend(&lr, lr.back() == '=' ? "" : ",", step, ":", row["lr"].get<double>());
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(RunFolder(r.run_dir).tensorboard())) files += e.is_regular_file();
  EXPECT_EQ(files, 2) << "one event file per start";
  const std::string cmd = absl::StrCat(LM_TEST_PYTHON, " ", LM_SOURCE_DIR, "/tests/core/tensorboard_check.py ",
                                       RunFolder(r.run_dir).tensorboard(), " '", want, "' '", lr, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lm::train
