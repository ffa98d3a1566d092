// Text samples at validation steps (train/samples.h): samples.jsonl rows at exactly the
// validation steps, prompts from the validation text or the config list, TensorBoard's Text tab,
// no effect on the training trajectory, and a resume that cuts samples.jsonl back like metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "train/trainer.h"
#include "tests/train/synthetic_source.h"

namespace lm::train {
namespace {
namespace fs = std::filesystem;

// Synthetic token ids as text: id 17 is the word "w17"; bos 1 and eos 2 as in the tokenizers.
TextCodec word_codec() {
  TextCodec c;
  c.encode = [](std::string_view text) {
    std::vector<int32_t> ids;
    std::istringstream in{std::string(text)};
    for (std::string w; in >> w;) ids.push_back(std::atoi(w.c_str() + 1));
    return ids;
  };
  c.decode = [](const std::vector<int32_t>& ids) {
    std::vector<std::string> words;
    for (int32_t id : ids) words.push_back(absl::StrCat("w", id));
    return absl::StrJoin(words, " ");
  };
  c.bos_id = 1;
  c.eos_id = 2;
  return c;
}

fs::path temp_run(const std::string& name) {
  auto p = fs::temp_directory_path() / ("lm_samples_test_" + std::to_string(getpid())) / name;
  fs::remove_all(p);
  return p;
}

// The tiny run with validation every 4 steps on two languages, samples of 5 tokens.
struct SampledRun {
  FitRequest req;
  ValSets val;
  explicit SampledRun(const fs::path& dir, int64_t steps) : req(testing::tiny_request(dir, steps)) {
    req.train.logging.interval = 2;
    req.train.eval.interval = 4;
    req.train.eval.windows = 1;
    req.train.eval.sample_tokens = 5;
    req.codec = word_codec();
    testing::SyntheticSource v(1, req.train.batch.seq_len + 1, req.model.vocab_size);
    std::vector<int32_t> flat;
    for (const char* lang : {"bn", "en"}) {
      v.next(&flat);
      std::replace(flat.begin(), flat.end(), 1, 3);  // no bos by chance
      if (std::string(lang) == "en") flat[3] = 1;  // a document starts here: its prompt starts after this bos
      val[lang] = {flat};
    }
  }
  absl::StatusOr<FitSummary> fit() {
    testing::SyntheticSource src(req.train.batch.micro_batch, req.train.batch.seq_len + 1, req.model.vocab_size);
    return train::fit(req, src, val);
  }
};

class SamplesTest : public ::testing::Test {
 protected:
  void SetUp() override { init_output(/*quiet=*/true); }
};

TEST_F(SamplesTest, WrittenAtEachValidationFromTheValidationText) {
  SampledRun run(temp_run("val"), 12);
  auto sum = run.fit();
  ASSERT_TRUE(sum.ok()) << sum.status();
  auto rows = read_metrics(RunFolder(run.req.run_dir).samples());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u) << "validation at steps 4, 8, 12";
  const TextCodec c = word_codec();
  for (size_t i = 0; i < rows->size(); ++i) {
    const Json& row = (*rows)[i];
    EXPECT_EQ(row["step"], 4 * static_cast<int64_t>(i + 1));
    EXPECT_EQ(row["tokens"], row["step"].get<int64_t>() * run.req.train.batch.micro_batch * run.req.train.batch.seq_len);
    EXPECT_GE(row["seconds"].get<double>(), 0.0);
    ASSERT_EQ(row["samples"].size(), 2u);
    int64_t generated = 0;
    for (const Json& s : row["samples"]) {
      const std::vector<int32_t>& w = run.val.at(s["name"].get<std::string>())[0];
      // bn has no bos: its first 8 tokens; en's prompt starts after the bos at position 3.
      const size_t from = s["name"] == "en" ? 4 : 0;
      EXPECT_EQ(s["prompt"], c.decode(std::vector<int32_t>(w.begin() + from, w.begin() + from + kValidationPromptTokens)));
      const int64_t n = s["new_tokens"].get<int64_t>();
      EXPECT_TRUE(n == 5 || (n < 5 && s["stopped_at_eos"].get<bool>())) << s.dump();
      EXPECT_FALSE(s["completion"].get<std::string>().empty() && n > 1) << s.dump();
      // decode(prompt + new) - decode(prompt): the words go on after a space, not glued to the
      // prompt's last word (issue 30 item 3).
      const std::string completion = s["completion"].get<std::string>();
      EXPECT_TRUE(completion.empty() || completion[0] == ' ') << s.dump();
      generated += n;
    }
    EXPECT_EQ(row["new_tokens"], generated);
  }
}

TEST_F(SamplesTest, ConfigPromptsAndOffSwitch) {
  SampledRun run(temp_run("prompts"), 8);
  run.req.train.eval.sample_prompts = {"w5 w6 w7", "w40"};
  ASSERT_TRUE(run.fit().ok());
  auto rows = read_metrics(RunFolder(run.req.run_dir).samples());
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0]["samples"][0]["name"], "p1");
  EXPECT_EQ((*rows)[0]["samples"][0]["prompt"], "w5 w6 w7");
  EXPECT_EQ((*rows)[0]["samples"][1]["prompt"], "w40");
  // Off: no file, and the same training trajectory (greedy decoding draws no random numbers).
  SampledRun off(temp_run("off"), 8);
  off.req.train.eval.sample_tokens = 0;
  auto s_off = off.fit();
  ASSERT_TRUE(s_off.ok());
  EXPECT_FALSE(fs::exists(RunFolder(off.req.run_dir).samples()));
  SampledRun on(temp_run("on"), 8);
  auto s_on = on.fit();
  ASSERT_TRUE(s_on.ok());
  EXPECT_EQ(s_on->losses, s_off->losses);
}

TEST_F(SamplesTest, ResumeCutsSamplesBackToTheCheckpoint) {
  SampledRun run(temp_run("resume"), 16);
  run.req.train.checkpoint.interval = 4;
  run.req.train.stop_at_step = 12;
  ASSERT_TRUE(run.fit().ok());
  // Killed after step 12's samples but before its checkpoint landed: `latest` names step 8.
  const RunFolder folder(run.req.run_dir);
  fs::remove_all(folder.checkpoint(12));
  ASSERT_TRUE(write_file_atomic(folder.latest(), RunFolder::step_name(8)).ok());
  run.req.resume = true;
  run.req.train.stop_at_step = -1;
  ASSERT_TRUE(run.fit().ok());
  auto rows = read_metrics(folder.samples());
  ASSERT_TRUE(rows.ok());
  std::vector<int64_t> steps;
  for (const Json& r : *rows) steps.push_back(r["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8, 12, 16})) << "each validation step once";
}

TEST_F(SamplesTest, TensorBoardReaderListsTheSamples) {
  if (std::system((std::string(LM_TEST_PYTHON) + " -c 'import tensorboard' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << LM_TEST_PYTHON << " has no tensorboard (pip install -r scripts/requirements-clients.txt)";
  SampledRun run(temp_run("tb"), 8);
  ASSERT_TRUE(run.fit().ok());
  auto rows = read_metrics(RunFolder(run.req.run_dir).samples());
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  // The Text tab shows "**prompt**completion" per prompt at each validation step.
  std::string want = "samples/bn=";
  for (const Json& r : *rows) {
    const Json& s = r["samples"][0];
    ASSERT_EQ(s["name"], "bn");
    absl::StrAppend(&want, want.back() == '=' ? "" : ",", r["step"].get<int64_t>(), ":**",
                    s["prompt"].get<std::string>(), "**", s["completion"].get<std::string>());
  }
  const std::string cmd = absl::StrCat(LM_TEST_PYTHON, " ", LM_SOURCE_DIR, "/tests/core/tensorboard_check.py ",
                                       RunFolder(run.req.run_dir).tensorboard(), " '", want, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace lm::train
