// Issue 30 item 17 on the real lmtrain: fit's start-up said ~20 lines (each fast path, the version
// report, a passes table, three device lines) on every start and resume. Now the default log is a
// handful of lines with one that sums up the start-up checks; -v lists each check and the time of
// each phase; -q wins over -v. And one default per concept: prepare drops exact duplicate
// documents as the tokenizer does (--no-dedup keeps them).
#include <regex>

#include "tests/soak/cli_harness.h"

namespace {
using namespace lm_cli_test;

// The info lines fit printed before its first progress line ("] train ").
std::vector<std::string> startup_info_lines(const std::string& err) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < err.size()) {
    const size_t end = std::min(err.find('\n', at), err.size());
    const std::string line = err.substr(at, end - at);
    at = end + 1;
    if (line.find(" info] train ") != std::string::npos) break;
    if (line.find(" info] ") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

int count_of(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

class StartupLog : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("run");
  }
  // fit as a user types it: no -q.
  Result fit_said(std::vector<std::string> args) {
    std::vector<std::string> v = {kLmtrain, "fit", "--data", w("shards"), "--config", w("run.json"), "--threads", "2"};
    v.insert(v.end(), args.begin(), args.end());
    return run(v, logs());
  }
};

// The default start-up of a new run: at most 5 info lines (passes, device + threads, model, MFU,
// checks) and the line that sums the checks up; no fast path of its own, no version report. Before:
// 23 lines before the first step (7 fast paths, gradient flow, 2 version lines, 3 device lines, a
// 7-line passes table, the threads line, model, MFU).
TEST_F(StartupLog, DefaultStartIsAHandfulOfLinesWithOneForTheChecks) {
  Result r = fit_said({"--preset", "tiny", "--tokenizer", w("tok"), "--steps", "2", "--out", w("new")});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = startup_info_lines(r.err);
  EXPECT_LE(lines.size(), 5u) << r.err;
  EXPECT_NE(r.err.find("] start-up checks ok: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fast paths match their references, gradient flow reaches all "), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("; start-up took [0-9.]+ s \\(-v lists each"))) << r.err;
  EXPECT_EQ(r.err.find("] fast path "), std::string::npos) << "each fast path is a -v line: " << r.err;
  EXPECT_EQ(r.err.find("LibTorch"), std::string::npos) << "the version report is a -v line: " << r.err;
  EXPECT_EQ(r.err.find("start-up phases:"), std::string::npos) << r.err;
}

// -v names every fast path the summary counted, the gradient flow and the versions, and times each
// start-up phase.
TEST_F(StartupLog, VerboseNamesEveryCheckAndTimesEachPhase) {
  Result plain = fit_said({"--preset", "tiny", "--tokenizer", w("tok"), "--steps", "2", "--out", w("plain")});
  ASSERT_EQ(plain.rc, 0) << plain.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(plain.err, m, std::regex("checks ok: ([0-9]+) fast paths"))) << plain.err;
  const int paths = std::stoi(m[1]);
  EXPECT_GE(paths, 2);

  Result v = fit_said({"--preset", "tiny", "--tokenizer", w("tok"), "--steps", "2", "--out", w("verbose"), "-v"});
  ASSERT_EQ(v.rc, 0) << v.err;
  EXPECT_EQ(count_of(v.err, "] fast path "), paths) << v.err;
  EXPECT_EQ(count_of(v.err, ": ok ("), paths + 1) << "each fast path and the gradient flow: " << v.err;
  EXPECT_NE(v.err.find("] gradient flow: ok ("), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("] lmtrain fit "), std::string::npos) << "the version report: " << v.err;
  for (const char* phase : {"data open ", "thread probe ", "fast paths ", "gradient flow ", "peak measurement ", "the rest "})
    EXPECT_NE(v.err.find(phase, v.err.find("] start-up phases: ")), std::string::npos) << phase << v.err;
  EXPECT_NE(v.err.find("lang / source"), std::string::npos) << "the passes table per source: " << v.err;

  // -q wins over -v: nothing but warnings.
  Result q = fit_said({"--preset", "tiny", "--tokenizer", w("tok"), "--steps", "2", "--out", w("quiet"), "-v", "-q"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.err.find(" info] "), std::string::npos) << q.err;
}

// A resume says where it resumed and the same handful; its checks skip the gradient flow (checked
// at step 0) and say so.
TEST_F(StartupLog, ResumeIsAsShort) {
  Result r = fit_said({"--out", w("run"), "--resume"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = startup_info_lines(r.err);
  EXPECT_LE(lines.size(), 6u) << r.err;
  EXPECT_NE(r.err.find("] resumed from "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fast paths match their references, gradient flow was checked at step 0"), std::string::npos)
      << r.err;
}

// One default per concept: prepare drops an exact duplicate document without being asked, as the
// tokenizer does, says so, and records it; --no-dedup keeps it.
TEST_F(StartupLog, PrepareDropsExactDuplicatesByDefault) {
  spit(ws() / "dup" / "en.txt",
       "the river runs north past the old market\nthe river runs north past the old market\n"
       "rain fell on the paper road in the morning light\n");
  spit(ws() / "dup" / "corpus.json", R"({"sources": [{"paths": ["en.txt"], "format": "lines", "lang": "en"}]})");
  const std::string corpus = w("dup/corpus.json");
  Result r = lmtrain({"prepare", "--corpus", corpus, "--tokenizer", w("tok"), "--out", w("dedup"),
                      "--val-fraction", "0"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto m = lm::read_json_file(w("dedup/manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["prepare"]["dedup"], true);
  EXPECT_EQ((*m)["prepare"]["duplicates_dropped"], 1);
  EXPECT_EQ((*m)["languages"]["en"]["docs"], 2);

  Result kept = run({kLmtrain, "prepare", "--corpus", corpus, "--tokenizer", w("tok"), "--out", w("kept"),
                     "--val-fraction", "0", "--no-dedup", "--threads", "2"},
                    logs());
  ASSERT_EQ(kept.rc, 0) << kept.err;
  m = lm::read_json_file(w("kept/manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["prepare"]["dedup"], false);
  EXPECT_EQ((*m)["languages"]["en"]["docs"], 3);

  // The default log says what was dropped.
  Result said = run({kLmtrain, "prepare", "--corpus", corpus, "--tokenizer", w("tok"), "--out", w("said"),
                     "--val-fraction", "0", "--threads", "2"},
                    logs());
  ASSERT_EQ(said.rc, 0) << said.err;
  EXPECT_NE(said.err.find("dropped 1 exact duplicate documents of 3 read"), std::string::npos) << said.err;
}

}  // namespace
