// Task loaders and prompt builders. Expected strings are written by hand from the harness's
// documented task definitions (lm_eval/tasks/<task>/*.yaml and utils.py) applied to the first
// example of each file in ../shared/data/sample/bench (named in each test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "eval/tasks.h"

namespace lm::eval {
namespace {

namespace fs = std::filesystem;

std::string sample_bench() { return std::string(LM_SOURCE_DIR) + "/../shared/data/sample/bench"; }
std::string full_bench() { return std::string(LM_SOURCE_DIR) + "/../shared/data/bench"; }

#define SKIP_WITHOUT(dir) \
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " absent"

McTask load(const std::string& name, const std::string& dir, int64_t limit = 0) {
  auto t = load_task(name, dir, limit);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : McTask{};
}

std::string temp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("lm_eval_test_" + name)).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// sample/bench/hellaswag/hellaswag_val_50.txt, item 0 (6 lines: query, label, 4 endings).
TEST(Tasks, HellaswagTextExportFirstItem) {
  SKIP_WITHOUT(sample_bench());
  McTask t = load("hellaswag", sample_bench());
  ASSERT_EQ(t.examples.size(), 50u);
  const McExample& ex = t.examples[0];
  ASSERT_EQ(ex.contexts.size(), 4u);
  // ctx_b "he" recovered from the export line and capitalised as the harness does.
  EXPECT_EQ(ex.contexts[0], "Roof shingle removal: A man is sitting on a roof. He");
  EXPECT_EQ(ex.continuations[0], " is using wrap to wrap a pair of skis.");
  EXPECT_EQ(ex.continuations[3], " starts pulling up roofing on a roof.");
  EXPECT_EQ(ex.norm_text[3], "starts pulling up roofing on a roof.");  // acc_norm excludes the delimiter
  EXPECT_EQ(ex.gold, 3);
  EXPECT_DOUBLE_EQ(t.chance(), 0.25);
}

// The original hellaswag_val.jsonl fields of the same item: the harness capitalises ctx_b,
// which the text export does not (docs/eval.md).
TEST(Tasks, HellaswagOriginalFieldsAndPreprocess) {
  McExample ex = hellaswag_from_fields("Roof shingle removal", "A man is sitting on a roof.", "he",
                                       {"is using wrap to wrap a pair of skis.", "x", "y", "z"}, 3);
  EXPECT_EQ(ex.contexts[0], "Roof shingle removal: A man is sitting on a roof. He");
  // WikiHow artefacts: " [title]" -> ". ", other [tags] dropped, double spaces collapsed.
  EXPECT_EQ(hellaswag_preprocess("[header] How to clean a rug [title] Vacuum it.  [step] Then dry it. "),
            " How to clean a rug. Vacuum it.  Then dry it.");  // python: 3 spaces -> 2
  const std::string d = temp_dir("hs_jsonl");
  write(d + "/hellaswag/hellaswag_val.jsonl",
        R"({"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he", "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "label": 3})"
        "\n");
  McTask t = load("hellaswag", d);
  ASSERT_EQ(t.examples.size(), 1u);
  EXPECT_EQ(t.examples[0].contexts[1], "Roof shingle removal: A man is sitting on a roof. He");
  EXPECT_EQ(t.examples[0].continuations[1], " is ripping level tiles off.");
  EXPECT_EQ(t.examples[0].gold, 3);
}

// The export line's fields: ctx_b is the lower-case start of the last sentence, else empty.
TEST(Tasks, HellaswagExportLineSplit) {
  auto f = hellaswag_split_export_line("Clean and jerk: A lady walks to a barbell. She bends down. the lady");
  EXPECT_EQ(f.activity_label, "Clean and jerk");
  EXPECT_EQ(f.ctx_a, "A lady walks to a barbell. She bends down.");
  EXPECT_EQ(f.ctx_b, "the lady");
  f = hellaswag_split_export_line("Home: How to dust. Take a cloth.");
  EXPECT_EQ(f.ctx_a, "How to dust. Take a cloth.");
  EXPECT_EQ(f.ctx_b, "");
  McExample ex = hellaswag_from_fields(f.activity_label, f.ctx_a, f.ctx_b, {"a [step] b", "c", "d", "e"}, 0);
  EXPECT_EQ(ex.contexts[0], "Home: How to dust. Take a cloth.");  // trailing " " of the empty ctx_b stripped
  EXPECT_EQ(ex.continuations[0], " a b");                          // "[step]" dropped, "  " -> " "
}

// bench/hellaswag/hellaswag_val_full.txt.bz2 through libbz2: all 10,042 validation items.
TEST(Tasks, HellaswagBz2FullValidation) {
  SKIP_WITHOUT(full_bench() + "/hellaswag");
  McTask t = load("hellaswag", full_bench());
  ASSERT_EQ(t.examples.size(), 10042u);
  EXPECT_EQ(t.examples[0].contexts[0], "Roof shingle removal: A man is sitting on a roof. He");
  // A third of the items end in a lower-case ctx_b fragment (counted independently in Python).
  EXPECT_NE(t.note.find("in 3243 of 10042 items"), std::string::npos) << t.note;
  // The 13 export items that kept "[...]" spans lose them through the harness's preprocess.
  // (5 unmatched "[" stay, as in the harness's output.)
  const std::regex span("\\[.*?\\]");
  int spans = 0;
  for (const auto& ex : t.examples)
    for (size_t c = 0; c < ex.contexts.size(); ++c)
      spans += std::regex_search(ex.contexts[c], span) || std::regex_search(ex.continuations[c], span);
  EXPECT_EQ(spans, 0);
  EXPECT_TRUE(t.source.find(".bz2") != std::string::npos);
  auto limited = load_task("hellaswag", full_bench(), 7);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->examples.size(), 7u);
}

// sample/bench/piqa/valid.jsonl line 1 + valid-labels.lst line 1 (label 0).
TEST(Tasks, PiqaFirstExample) {
  SKIP_WITHOUT(sample_bench());
  McTask t = load("piqa", sample_bench());
  ASSERT_EQ(t.examples.size(), 50u);
  const McExample& ex = t.examples[0];
  EXPECT_EQ(ex.contexts[0], "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:");
  EXPECT_EQ(ex.continuations[0],
            " Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips, "
            "you will also need to supply it with a water bottle and a food dish.");
  EXPECT_EQ(ex.continuations[1],
            " Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans material, "
            "you will also need to supply it with a water bottle and a food dish.");
  EXPECT_EQ(ex.gold, 0);
  EXPECT_EQ(t.examples[1].gold, 1);
  EXPECT_EQ(t.examples[1].continuations[1], " finish, woodgrain with  bobby pin ");  // kept byte for byte
  EXPECT_DOUBLE_EQ(t.chance(), 0.5);
}

// sample/bench/winogrande/dev.jsonl line 1 (answer "2"): partial scoring.
TEST(Tasks, WinograndePartialScoring) {
  SKIP_WITHOUT(sample_bench());
  McTask t = load("winogrande", sample_bench());
  const McExample& ex = t.examples[0];
  EXPECT_EQ(ex.contexts[0], "Sarah was a much better surgeon than Maria so Sarah");
  EXPECT_EQ(ex.contexts[1], "Sarah was a much better surgeon than Maria so Maria");
  EXPECT_EQ(ex.continuations[0], " always got the easier cases.");
  EXPECT_EQ(ex.continuations[1], " always got the easier cases.");
  EXPECT_EQ(ex.gold, 1);
  EXPECT_EQ(t.examples[1].gold, 0);
  EXPECT_TRUE(t.acc_only);  // the harness reports acc only: acc_norm would divide by the context
  EXPECT_FALSE(winogrande_example("no blank here", "a", "b", 1).ok());
}

// sample/bench/openbookqa/test.jsonl line 1 (answerKey B): the bare stem, no "Question:".
TEST(Tasks, OpenbookqaFirstExample) {
  SKIP_WITHOUT(sample_bench());
  McTask t = load("openbookqa", sample_bench());
  const McExample& ex = t.examples[0];
  EXPECT_EQ(ex.contexts[0],
            "A person wants to start saving money so that they can afford a nice vacation at the end of the "
            "year. After looking over their budget and expenses, they decide the best way to save money is to");
  EXPECT_EQ(ex.continuations[1], " quit eating lunch out");
  EXPECT_EQ(ex.gold, 1);
  EXPECT_EQ(ex.id, "8-343");
}

// sample/bench/arc_easy/ARC-Easy-Dev.jsonl and arc_challenge/ARC-Challenge-Dev.jsonl line 1.
TEST(Tasks, ArcFirstExamplesAndDevSplit) {
  SKIP_WITHOUT(sample_bench());
  McTask e = load("arc_easy", sample_bench());
  EXPECT_EQ(e.examples[0].contexts[0], "Question: Which technology was developed most recently?\nAnswer:");
  EXPECT_EQ(e.examples[0].continuations[0], " cellular telephone");
  EXPECT_EQ(e.examples[0].gold, 0);
  EXPECT_NE(e.split.find("dev"), std::string::npos);
  McTask c = load("arc_challenge", sample_bench());
  EXPECT_EQ(c.examples[0].contexts[0],
            "Question: Juan and LaKeisha roll a few objects down a ramp. They want to see which object rolls "
            "the farthest. What should they do so they can repeat their investigation?\nAnswer:");
  EXPECT_EQ(c.examples[0].continuations[3], " Record the details of the investigation.");
  EXPECT_EQ(c.examples[0].gold, 3);
}

// Numeric answer keys ("1".."4") index the labels, as the harness's choices.label.index().
TEST(Tasks, ArcNumericAnswerKey) {
  const std::string d = temp_dir("arc_num");
  write(d + "/arc_easy/ARC-Easy-Dev.jsonl",
        R"({"id":"q1","question":{"stem":"Pick two.","choices":[{"text":"one","label":"1"},{"text":"two","label":"2"},{"text":"three","label":"3"}]},"answerKey":"2"})"
        "\n");
  McTask t = load("arc_easy", d);
  EXPECT_EQ(t.examples[0].gold, 1);
  EXPECT_NEAR(t.chance(), 1.0 / 3.0, 1e-12);
}

// bench/copa/balanced-copa-dev-all.xml item id 401 (effect, alternative 1 in this file).
TEST(Tasks, CopaXmlValidationIds) {
  SKIP_WITHOUT(full_bench() + "/copa");
  McTask t = load("copa", full_bench());
  ASSERT_EQ(t.examples.size(), 100u);  // ids 401-500 only
  const McExample& ex = t.examples[0];
  EXPECT_EQ(ex.id, "401");
  EXPECT_EQ(ex.contexts[0], "The man turned on the faucet therefore");
  // doc_to_choice " " + lower-cased first letter, then the target delimiter " ": two spaces.
  EXPECT_EQ(ex.continuations[0], "  water flowed from the spout.");
  EXPECT_EQ(ex.continuations[1], "  the toilet filled with water.");
  EXPECT_EQ(ex.norm_text[0], " water flowed from the spout.");
  EXPECT_EQ(ex.gold, 0);
}

// SuperGLUE val.jsonl, written by hand in that format (COPA items 1 and 3).
TEST(Tasks, CopaSuperGlueJsonl) {
  const std::string d = temp_dir("copa_jsonl");
  write(d + "/copa/val.jsonl",
        R"({"premise": "My body cast a shadow over the grass.", "choice1": "The sun was rising.", "choice2": "The grass was cut.", "question": "cause", "idx": 0, "label": 0})"
        "\n"
        R"({"premise": "The women met for coffee.", "choice1": "The cafe reopened in a new location.", "choice2": "They wanted to catch up with each other.", "question": "cause", "idx": 1, "label": 1})"
        "\n"
        R"({"premise": "The man turned on the faucet.", "choice1": "The toilet filled with water.", "choice2": "Water flowed from the spout.", "question": "effect", "idx": 2, "label": 1})"
        "\n");
  McTask t = load("copa", d);
  ASSERT_EQ(t.examples.size(), 3u);
  EXPECT_TRUE(t.acc_only);  // super_glue/copa/default.yaml lists acc alone
  EXPECT_EQ(t.examples[0].contexts[0], "My body cast a shadow over the grass because");
  EXPECT_EQ(t.examples[0].continuations[0], "  the sun was rising.");
  EXPECT_EQ(t.examples[1].continuations[1], "  they wanted to catch up with each other.");
  EXPECT_EQ(t.examples[1].gold, 1);
  EXPECT_EQ(t.examples[2].contexts[1], "The man turned on the faucet therefore");
  EXPECT_EQ(t.examples[2].gold, 1);
}

// sample/bench/benqa/8th-Science_50.csv rows 2 and 3 (answer 'd', 'c'); row 3 has U+09DF which
// NFC turns into U+09AF U+09BC.
TEST(Tasks, BenqaBothLanguagesNfc) {
  SKIP_WITHOUT(sample_bench());
  McTask en = load("benqa_en", sample_bench());
  McTask bn = load("benqa_bn", sample_bench());
  ASSERT_EQ(en.examples.size(), bn.examples.size());
  EXPECT_EQ(en.examples[0].contexts[0], "Question: Which acid present in tamarind?\nAnswer:");
  EXPECT_EQ(en.examples[0].continuations[3], " Tartaric");
  EXPECT_EQ(en.examples[0].gold, 3);
  EXPECT_EQ(bn.examples[0].contexts[0], "প্রশ্ন: তেঁতুলে কোন এসিড থাকে?\nউত্তর:");
  EXPECT_EQ(bn.examples[0].continuations[0], " ম্যালিক");
  EXPECT_EQ(bn.examples[1].gold, 2);
  EXPECT_NE(bn.examples[1].contexts[0].find("\u09b9\u09af\u09bc?"), std::string::npos);
  EXPECT_EQ(bn.examples[1].contexts[0].find("\u09df"), std::string::npos);
}

TEST(Tasks, MissingFileSaysWhereItLooked) {
  const std::string d = temp_dir("missing");
  for (const auto& name : task_names()) {
    auto t = load_task(name, d);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << name;
    EXPECT_NE(std::string(t.status().message()).find("not found, expected " + d), std::string::npos)
        << t.status();
  }
  EXPECT_EQ(load_task("squad", d).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lm::eval
