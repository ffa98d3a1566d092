// The Bangla tasks' prompts without a model: each renders a document as its lm-eval YAML does
// (strings written out from the YAML by hand here; bangla_harness_check.py compares with the
// harness itself), few-shot blocks, the group, and bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "corpus/parquet.h"
#include "eval/py_random.h"
#include "eval/tasks.h"
#include "eval/tasks_bn.h"

#define LM_ASSERT_OK(expr)                            \
  do {                                                \
    const ::absl::Status lm_st_ = (expr);             \
    ASSERT_TRUE(lm_st_.ok()) << lm_st_.message();     \
  } while (0)

namespace lm::eval {
namespace {
namespace fs = std::filesystem;

TEST(BanglaTasks, PyStripRemovesUnicodeWhitespace) {
  EXPECT_EQ(py_strip("\u00a0 প্রশ্ন\u3000\n"), "প্রশ্ন");
  EXPECT_EQ(py_strip(" \t"), "");
  EXPECT_EQ(py_strip("ক খ"), "ক খ");
  EXPECT_EQ(py_strip("\u200bক"), "\u200bক");  // ZERO WIDTH SPACE is not whitespace in Python
}

TEST(BanglaTasks, RendersEachYamlsPrompt) {
  auto mmlu = bangla_doc("bangla_mmlu", Json::parse(R"({"question":" প্র? ","options":["ক","খ","গ","ঘ"],"answer":"C"})"), "t");
  LM_ASSERT_OK(mmlu.status());
  EXPECT_EQ(mmlu->query, "প্র? A. ক B. খ C. গ D. ঘ Answer:");
  EXPECT_EQ(mmlu->gold, 2);
  auto piqa = bangla_doc("piqa_bn", Json::parse(R"({"goal":"g ","sol1":" a","sol2":"b","label":1})"), "t");
  LM_ASSERT_OK(piqa.status());
  EXPECT_EQ(piqa->query, "g\nA. a\nB. b\nAnswer:");
  EXPECT_EQ(piqa->gold, 1);
  auto boolq = bangla_doc("boolqa_bn", Json::parse(R"({"passage":"p","question":"q","answer":"no"})"), "t");
  LM_ASSERT_OK(boolq.status());
  EXPECT_EQ(boolq->query, "Passage:\np\n\nQuestion:\nq\n\nAnswer:");
  EXPECT_EQ(boolq->choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(boolq->gold, 1);
  auto obqa = bangla_doc("openbookqa_bn", Json::parse(R"({"question_stem":"s","choices":{"text":["x","y","z","w"],
      "label":["A","B","C","D"]},"answerKey":"D"})"), "t");
  LM_ASSERT_OK(obqa.status());
  EXPECT_EQ(obqa->query, "s\nA. x\nB. y\nC. z\nD. w\nAnswer:");
  EXPECT_EQ(obqa->gold, 3);
  auto bele = bangla_doc("belebele_ben_Beng", Json::parse(R"({"flores_passage":"P1","question":" q","mc_answer1":"a",
      "mc_answer2":"b","mc_answer3":"c","mc_answer4":"d","correct_answer_num":"2"})"), "t");
  LM_ASSERT_OK(bele.status());
  EXPECT_EQ(bele->query, "P: P1\nQ: q\nA: a\nB: b\nC: c\nD: d\nAnswer:");
  EXPECT_EQ(bele->gold, 1);
  auto arc = bangla_doc("arc_bn", Json::parse(R"({"instruction":" i [title] j","option_a":"a","option_b":"b [x]",
      "option_c":"c","option_d":"d","option_e":"","answer":"B"})"), "t");
  LM_ASSERT_OK(arc.status());
  EXPECT_EQ(arc->query, "Question: i. j\nAnswer:");
  EXPECT_EQ(arc->choices, (std::vector<std::string>{"a", "b ", "c", "d"}));
  auto hs = bangla_doc("hellaswag_bn", Json::parse(R"({"activity_label":"L","ctx_a":"a","ctx_b":"bC d",
      "endings":["x  y","z"],"label":" 1"})"), "t");
  LM_ASSERT_OK(hs.status());
  EXPECT_EQ(hs->query, "L: a Bc d");
  EXPECT_EQ(hs->choices, (std::vector<std::string>{"x y", "z"}));
  EXPECT_EQ(hs->gold, 1);
}

TEST(BanglaTasks, RefusesATargetThatIsNoChoice) {
  auto bad = bangla_doc("m_mmlu_bn", Json::parse(R"({"instruction":"i","option_a":"a","option_b":"b","option_c":"c",
      "option_d":"d","answer":"F"})"), "f.jsonl: document 3");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("f.jsonl: document 3: answer \"F\""), std::string::npos);
}

// Few-shot: the first k of the few-shot split; from the test split itself (belebele) the item is
// left out of its own examples. The description opens the context with no delimiter after it.
TEST(BanglaTasks, FewshotIsFirstNAndSkipsTheItemItself) {
  const std::string dir = (fs::temp_directory_path() / "lm_bn_tasks").string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/belebele_ben_Beng");
  fs::create_directories(dir + "/piqa_bn");
  std::ofstream b(dir + "/belebele_ben_Beng/test.jsonl");
  for (int i = 0; i < 3; ++i)
    b << R"({"flores_passage":"P)" << i << R"(","question":"q","mc_answer1":"a","mc_answer2":"b","mc_answer3":"c",)"
      << R"("mc_answer4":"d","correct_answer_num":"1"})" << "\n";
  b.close();
  auto t = load_task("belebele_ben_Beng", dir, 0, 1);
  LM_ASSERT_OK(t.status());
  ASSERT_EQ(t->examples.size(), 3u);
  EXPECT_EQ(t->examples[0].contexts[0].substr(0, 5), "P: P1");  // item 0 skips itself: P1 first
  EXPECT_EQ(t->examples[1].contexts[0].substr(0, 5), "P: P0");
  EXPECT_NE(t->examples[1].contexts[0].find("Answer: A\n\nP: P1"), std::string::npos);
  std::ofstream p(dir + "/piqa_bn/validation.jsonl");
  p << R"({"goal":"g","sol1":"a","sol2":"b","label":0})" << "\n";
  p.close();
  auto z = load_task("piqa_bn", dir, 0, 0);
  LM_ASSERT_OK(z.status());
  EXPECT_EQ(z->examples[0].contexts[0], "Bangla PIQA: physical commonsense reasoning questions.g\nA. a\nB. b\nAnswer:");
  EXPECT_TRUE(z->acc_only);
  EXPECT_EQ(load_task("piqa_bn", dir, 0, 2).status().code(), absl::StatusCode::kNotFound);  // no train.jsonl
  EXPECT_EQ(load_task("hellaswag_bn", dir, 0, 0).status().code(), absl::StatusCode::kNotFound);
  fs::create_directories(dir + "/global_mmlu_bn");
  std::ofstream g(dir + "/global_mmlu_bn/test.jsonl");
  g << R"({"question":"q","option_a":"a","option_b":"b","option_c":"c","option_d":"d","answer":"A"})" << "\n";
  g.close();
  EXPECT_EQ(load_task("global_mmlu_bn", dir, 0, 5).status().code(), absl::StatusCode::kNotFound);  // no dev.jsonl
  fs::remove_all(dir);
}

// global_mmlu_bn is six category subtasks in the harness: an item of another category (or none)
// is in none of them, so it is skipped here too; --limit applies to each category.
TEST(BanglaTasks, GlobalMmluSkipsItemsOutsideTheSixCategoriesAndLimitsEach) {
  const std::string dir = (fs::temp_directory_path() / ("lm_bn_gm_" + std::to_string(getpid()))).string();
  fs::create_directories(dir + "/global_mmlu_bn");
  std::ofstream g(dir + "/global_mmlu_bn/test.jsonl");
  for (const char* cat : {R"("STEM")", R"("Cooking")", "null", R"("Social Sciences")", R"("STEM")"})
    g << R"({"question":"q","option_a":"a","option_b":"b","option_c":"c","option_d":"d","answer":"A",)"
      << R"("subject_category":)" << cat << "}\n";
  g.close();
  auto t = load_task("global_mmlu_bn", dir, 0, 0);
  LM_ASSERT_OK(t.status());
  EXPECT_EQ(t->examples.size(), 3u);
  // --limit N, as the harness applies it to each category subtask: the first N of each category.
  auto one = load_task("global_mmlu_bn", dir, 1, 0);
  LM_ASSERT_OK(one.status());
  EXPECT_EQ(one->examples.size(), 2u);
  fs::remove_all(dir);
}

// CPython 3.11: random.Random(1234): getrandbits(32) x 3 = 4150886329, 3342196574, 1892932127;
// then sample(range(10), 3), sample(range(10), 3), sample(range(400), 5), sample(range(30), 7) on
// one generator = [7,1,0] [1,0,9] [50,392,181,121,8] [0,25,29,11,20,19,15] (pool and set algorithms).
TEST(PyRandom, EqualsCPython) {
  PyRandom r(1234);
  EXPECT_EQ(r.getrandbits(32), 4150886329u);
  EXPECT_EQ(r.getrandbits(32), 3342196574u);
  EXPECT_EQ(r.getrandbits(32), 1892932127u);
  PyRandom s(1234);
  EXPECT_EQ(s.sample(10, 3), (std::vector<uint64_t>{7, 1, 0}));
  EXPECT_EQ(s.sample(10, 3), (std::vector<uint64_t>{1, 0, 9}));
  EXPECT_EQ(s.sample(400, 5), (std::vector<uint64_t>{50, 392, 181, 121, 8}));
  EXPECT_EQ(s.sample(30, 7), (std::vector<uint64_t>{0, 25, 29, 11, 20, 19, 15}));
}

// ---- the same splits as the Hugging Face hub ships them (Parquet), issue 41 item 1 ----

// tests/eval/bn_parquet_fixtures.py: the harness check's fixture rows as JSONL and as Parquet
// (single files, hub shards, narrow ints, large lists, row groups of 3) under one folder.
class BanglaParquet : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("lm_bn_parquet_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string cmd = std::string(LM_TEST_PYTHON) + " " + LM_SOURCE_DIR + "/tests/eval/bn_parquet_fixtures.py " +
                            dir_ + " > " + dir_ + "/fixtures.log 2>&1";
    const int rc = std::system(cmd.c_str());
    rc_ = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (rc_ == 77) GTEST_SKIP() << LM_TEST_PYTHON << " has no pyarrow";
    ASSERT_EQ(rc_, 0) << "bn_parquet_fixtures.py failed: see " << dir_ << "/fixtures.log";
  }
  // A copy of one task's Parquet folder under DIR/<name>/<task>, to spoil.
  static std::string copy_task(const std::string& name, const std::string& task) {
    const std::string root = dir_ + "/" + name;
    fs::create_directories(root);
    fs::copy(dir_ + "/parquet/" + task, root + "/" + task, fs::copy_options::recursive);
    return root;
  }
  static inline std::string dir_;
  static inline int rc_ = -1;
};

TEST_F(BanglaParquet, WithoutArrowTheRefusalNamesTheBuildOption) {
  if (data::parquet_supported()) GTEST_SKIP() << "built with Arrow (LM_WITH_PARQUET)";
  const auto t = load_task("piqa_bn", dir_ + "/parquet", 0, 0);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find("piqa_bn/validation.parquet: this is a Parquet file, but this build has no "
                                      "Parquet support (LM_WITH_PARQUET)"), std::string::npos) << t.status();
}

// Every task of every family, 0-shot and 2-shot (first_n and the Random(1234) samplers, few-shot
// pools from another split and from the test split itself): prompts, choices, gold and ids equal.
TEST_F(BanglaParquet, EveryTaskGivesTheSameItemsAsFromJsonl) {
  if (!data::parquet_supported()) GTEST_SKIP() << "no Parquet support in this build";
  for (const std::string& task : bangla_task_names()) {
    for (const int64_t k : {0, 2}) {
      auto j = load_task(task, dir_ + "/jsonl", 0, k);
      auto p = load_task(task, dir_ + "/parquet", 0, k);
      LM_ASSERT_OK(j.status());
      LM_ASSERT_OK(p.status());
      EXPECT_NE(p->source.find(".parquet"), std::string::npos) << p->source;
      EXPECT_EQ(p->split, j->split) << task;
      ASSERT_EQ(p->examples.size(), j->examples.size()) << task;
      ASSERT_GE(p->examples.size(), 8u) << task;
      for (size_t i = 0; i < j->examples.size(); ++i) {
        const McExample &a = j->examples[i], &b = p->examples[i];
        const std::string what = task + " " + std::to_string(k) + "-shot item " + std::to_string(i);
        EXPECT_EQ(b.id, a.id) << what;
        EXPECT_TRUE(b.contexts == a.contexts) << what << ": contexts differ";  // (long Bangla: not printed)
        EXPECT_TRUE(b.continuations == a.continuations) << what << ": continuations differ";
        EXPECT_TRUE(b.norm_text == a.norm_text) << what << ": norm_text differs";
        EXPECT_EQ(b.gold, a.gold) << what;
      }
    }
  }
  // boolqa_bn's validation split is the hub's converted parts, read in number order.
  auto boolq = load_task("boolqa_bn", dir_ + "/parquet", 0, 0);
  LM_ASSERT_OK(boolq.status());
  EXPECT_EQ(boolq->source, dir_ + "/parquet/boolqa_bn/validation/0000.parquet," + dir_ +
                               "/parquet/boolqa_bn/validation/0001.parquet");
  // arc_bn's test split is two hub shards, read in shard order.
  auto arc = load_task("arc_bn", dir_ + "/parquet", 0, 0);
  LM_ASSERT_OK(arc.status());
  EXPECT_EQ(arc->source, dir_ + "/parquet/arc_bn/test-00000-of-00002.parquet," + dir_ +
                             "/parquet/arc_bn/test-00001-of-00002.parquet");
}

TEST_F(BanglaParquet, BadInputNamesTheFileAndTheDocument) {
  if (!data::parquet_supported()) GTEST_SKIP() << "no Parquet support in this build";
  // Labels stored as strings: "0" is no index (ints stay ints; nothing turns "0" into 0).
  auto s = load_task("piqa_bn", dir_ + "/bad/label_string", 0, 0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("piqa_bn/validation.parquet: document 1: label \"" ), std::string::npos) << s.status();
  auto b = load_task("piqa_bn", dir_ + "/bad/goal_binary", 0, 0);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("validation.parquet: column 'goal' is of type binary"), std::string::npos)
      << b.status();
  // A truncated file.
  const std::string cut = copy_task("cut", "piqa_bn");
  fs::resize_file(cut + "/piqa_bn/validation.parquet", fs::file_size(cut + "/piqa_bn/validation.parquet") / 2);
  auto c = load_task("piqa_bn", cut, 0, 0);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(c.status().message().find("piqa_bn/validation.parquet: cannot read as Parquet"), std::string::npos)
      << c.status();
  // A shard missing from a hub split.
  const std::string few = copy_task("few", "arc_bn");
  fs::remove(few + "/arc_bn/test-00000-of-00002.parquet");
  auto f = load_task("arc_bn", few, 0, 0);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("split 'test' do not make one set: 1 files named test-*-of-2, shard 0 missing"),
            std::string::npos) << f.status();
  // A gap in the hub's converted parts.
  const std::string gap = copy_task("gap", "boolqa_bn");
  fs::remove(gap + "/boolqa_bn/validation/0000.parquet");
  auto g = load_task("boolqa_bn", gap, 0, 0);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("boolqa_bn/validation: the Parquet parts are numbered with a gap: 0 parts, then "
                                      "0001.parquet"), std::string::npos) << g.status();
  // JSONL beside Parquet: the JSONL is read (the order .jsonl, .parquet, shards, parts; the log says so).
  const std::string both = copy_task("both", "piqa_bn");
  fs::copy(dir_ + "/jsonl/piqa_bn/validation.jsonl", both + "/piqa_bn/validation.jsonl");
  auto j = load_task("piqa_bn", both, 0, 0);
  LM_ASSERT_OK(j.status());
  EXPECT_EQ(j->source, both + "/piqa_bn/validation.jsonl");
  EXPECT_EQ(load_task("boolqa_bn", dir_ + "/bad/label_string", 0, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(load_task("boolqa_bn", dir_ + "/bad/label_string", 0, 0).status().message().find(
                "validation.jsonl or validation.parquet or validation-00000-of-NNNNN.parquet or validation/0000.parquet"),
            std::string::npos);
}

}  // namespace
}  // namespace lm::eval
