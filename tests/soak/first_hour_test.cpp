// Issue 30, "the first hour" (items 2, 4, 15), end to end on the real lmtrain / lmeval: lmeval mc
// scores what fits the context; export's last line says what bf16 means; lmeval picks the GPU by
// itself. Each case works on a copy of the shared workspace (tests/soak/cli_harness.h).
#include "tests/soak/cli_harness.h"

namespace {
using namespace lm_cli_test;

class FirstHour : public BadInput {};

// Item 2: an example longer than the model's context is skipped and counted, the rest scored
// (before: "piqa example ... longer than the model's context" and no result); --strict stops.
TEST_F(FirstHour, McSkipsExamplesLongerThanTheContextUnlessStrict) {
  const std::string bench = LM_SOURCE_DIR "/../shared/data/sample/bench";
  if (!fs::exists(bench + "/piqa")) GTEST_SKIP() << bench << "/piqa absent";
  copy_in("run");
  const std::vector<std::string> mc = {"mc", "--run", w("run"), "--data-dir", bench, "--tasks", "piqa,arc_easy",
                                       "--limit", "8", "--out", w("mc.json")};
  Result r = lmeval(mc);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = lm::read_json_file(w("mc.json"));
  ASSERT_TRUE(j.ok()) << j.status();
  const Json& piqa = (*j)["tasks"]["piqa"];
  EXPECT_GE(piqa["skipped_too_long"].get<int64_t>(), 1) << piqa.dump();
  EXPECT_EQ(piqa["n"].get<int64_t>() + piqa["skipped_too_long"].get<int64_t>(), 8);
  EXPECT_EQ((*j)["tasks"]["arc_easy"]["n"], 8);
  EXPECT_NE(r.out.find("too long"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("piqa: skipped"), std::string::npos) << r.err;
  std::vector<std::string> strict = mc;
  strict.push_back("--strict");
  r = lmeval(strict);
  EXPECT_BAD_INPUT(r, "longer than the model's context", "--strict");
}

// Item 4: the export's last line says what bf16 means next to lmeval on the run and how to get
// fp32; the fp32 export says it agrees.
TEST_F(FirstHour, ExportsLastLineSaysBf16AndHowToGetFp32) {
  copy_in("run");
  auto last_line = [](const std::string& out) {
    std::string s = out;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s.substr(s.find_last_of('\n') + 1);
  };
  Result r = lmtrain({"export", "--run", w("run"), "--out", w("hf")});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string bf16 = last_line(r.out);
  for (const char* want : {"bf16", "lmeval", "--dtype fp32"}) EXPECT_NE(bf16.find(want), std::string::npos) << bf16;
  EXPECT_NE(slurp(ws() / "hf" / "README.md").find(bf16), std::string::npos) << "the model card says the same";
  r = lmtrain({"export", "--run", w("run"), "--out", w("hf32"), "--dtype", "fp32"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(last_line(r.out).rfind("fp32 weights", 0), 0u) << r.out;
}

// Item 15: lmeval nll/mc/sample default to --device auto (cuda when visible, as fit) and sample
// takes --device; the result says which device and why. Also item 3's printing: the text line is
// the prompt followed by the --json completion.
TEST_F(FirstHour, LmevalDeviceIsAutoByDefaultAndSampleTakesIt) {
  copy_in("run");
  spit(ws() / "heldout.txt", "The history of the river city.\nA song under the morning light.\n");
  Result r = lmeval({"nll", "--run", w("run"), "--text", w("heldout.txt"), "--out", w("nll.json")});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = lm::read_json_file(w("nll.json"));
  ASSERT_TRUE(j.ok()) << j.status();
  const std::string rule = (*j)["device_rule"].get<std::string>();
  EXPECT_EQ(rule.rfind("auto: ", 0), 0u) << rule;
  EXPECT_EQ((*j)["device"], rule == "auto: a CUDA device is visible" ? "cuda" : "cpu");
  const std::vector<std::string> sample = {"sample", "--run", w("run"), "--prompt", "The history of",
                                           "--max-new-tokens", "6"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = sample;
    v.insert(v.end(), extra.begin(), extra.end());
    return lmeval(v);
  };
  r = with({"--device", "cpu", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto s = Json::parse(r.out);
  EXPECT_EQ(s["device"], "cpu");
  EXPECT_EQ(s["device_rule"], "asked");
  r = with({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["device_rule"].get<std::string>().rfind("auto: ", 0), 0u) << r.out;
  r = with({"--device", "cpu"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "The history of" + s["completion"].get<std::string>() + "\n");
  EXPECT_BAD_INPUT(with({"--device", "gpu"}), "--device: expected auto, cpu or cuda");
}

}  // namespace
