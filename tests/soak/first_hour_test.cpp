// Issue 30, "the first hour" (items 2, 4, 14, 15), end to end on the real lmtrain / lmeval: a
// Ctrl-C during prepare cleans up after itself, --force leaves no shard of the previous corpus,
// a folder without shards is described as what it holds; lmeval mc scores what fits the context;
// export's last line says what bf16 means; lmeval picks the GPU by itself. Each case works on a
// copy of the shared workspace (tests/soak/cli_harness.h).
#include <chrono>
#include <set>
#include <thread>

#include "tests/soak/cli_harness.h"

namespace {
using namespace lm_cli_test;

// Starts argv in the background with stdout and stderr in `log`; returns its pid.
pid_t start(const std::vector<std::string>& argv, const fs::path& log) {
  fs::create_directories(log.parent_path());
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// The exit status of `pid` (128+N after signal N); -1 while it runs when `block` is false.
int exit_status(pid_t pid, bool block) {
  int status = 0;
  if (waitpid(pid, &status, block ? 0 : WNOHANG) == 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool has_shard_file(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".lmtok") return true;
  return false;
}

// A corpus that takes prepare several 4 MB batches: `mb` MB of 12-word lines (each a document)
// drawn from a fixed word list by a fixed xorshift, so every run writes the same file.
std::string big_corpus(const fs::path& dir, size_t mb) {
  static const std::vector<std::string> words = {"the",   "history", "of",    "river", "city",  "language", "old",
                                                 "north", "sea",     "paper", "road",  "rain",  "market",   "song",
                                                 "a",     "and",     "with",  "was",   "under", "morning",  "light"};
  std::string text;
  text.reserve(mb << 20);
  uint64_t x = 88172645463325252ull;
  while (text.size() < (mb << 20)) {
    for (int i = 0; i < 12; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      text += words[x % words.size()];
      text += ' ';
    }
    text.back() = '\n';
  }
  spit(dir / "big.txt", text);
  spit(dir / "corpus.json", R"({"sources": [{"paths": ["big.txt"], "format": "lines", "lang": "en"}]})");
  return (dir / "corpus.json").string();
}

class FirstHour : public BadInput {
 protected:
  // `lmtrain prepare` of `corpus` into `out` in the background, SIGINT once its staging folder
  // holds a shard file; returns the exit status and the output in `log`.
  int prepare_interrupted(const std::string& corpus, const std::string& out, bool force, std::string* log) {
    std::vector<std::string> argv = {kLmtrain, "prepare", "--corpus", corpus, "--tokenizer", w("tok"), "--out",
                                     w(out), "--shard-tokens", "20000", "--threads", "2"};
    if (force) argv.push_back("--force");
    const fs::path log_file = logs() / (out + ".log");
    const pid_t pid = start(argv, log_file);
    const fs::path staging = ws() / out / ".prepare.tmp";
    int rc = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!has_shard_file(staging) && (rc = exit_status(pid, false)) < 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (rc < 0) {
      kill(pid, SIGINT);
      rc = exit_status(pid, true);
    } else {
      ADD_FAILURE() << "prepare ended (" << rc << ") before a shard was staged: the corpus is too small";
    }
    *log = slurp(log_file);
    return rc;
  }
};

// Item 14: SIGINT during prepare removes its .prepare.tmp and says so, exits 130; shards that were
// there (--force) are untouched, and a folder prepare created is removed with it. Before, the
// signal killed prepare outright: exit 130, no message, a .prepare.tmp that then blocked the same
// command ("already holds shards").
TEST_F(FirstHour, PrepareInterruptedBySigintRemovesItsStagingFolder) {
  copy_in("tok");
  copy_in("shards");
  const std::string corpus = big_corpus(ws() / "big", 24);
  const Snapshot before = snapshot(ws() / "shards");
  for (const std::string out : {"shards", "fresh"}) {
    SCOPED_TRACE(out);
    std::string log;
    EXPECT_EQ(prepare_interrupted(corpus, out, /*force=*/out == "shards", &log), 130) << log;
    EXPECT_NE(log.find("prepare stopped by signal 2"), std::string::npos) << log;
    EXPECT_NE(log.find("removed " + w(out) + "/.prepare.tmp ("), std::string::npos) << log;
    EXPECT_NE(log.find(out == "shards" ? "; nothing else in " + w(out) + " was changed"
                                       : " and " + w(out) + ", which this prepare had created"),
              std::string::npos)
        << log;
    EXPECT_FALSE(fs::exists(ws() / out / ".prepare.tmp")) << log;
  }
  EXPECT_EQ(snapshot(ws() / "shards"), before);
  EXPECT_FALSE(fs::exists(ws() / "fresh")) << "the folder prepare created is left behind";
}

// Item 14: a folder holding other files is described as what it holds (it was "already holds
// shards"); one holding only an interrupted prepare's .prepare.tmp (kill -9) is taken as empty.
TEST_F(FirstHour, PrepareSaysWhatAFolderWithoutShardsHolds) {
  copy_in("tok");
  spit(ws() / "notes" / "notes.txt", "my notes\n");
  spit(ws() / "killed" / ".prepare.tmp" / "en.x.train.00000.lmtok", "half a shard");
  const Snapshot before = snapshot(ws() / "notes");
  Result r = lmtrain({"prepare", "--corpus", kSampleCorpus, "--tokenizer", w("tok"), "--out", w("notes")});
  EXPECT_BAD_INPUT(r, w("notes") + ": is not empty: it holds notes.txt and no shards", "--force");
  EXPECT_EQ(r.err.find("already holds shards"), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(ws() / "notes"), before);
  r = lmtrain({"prepare", "--corpus", kSampleCorpus, "--tokenizer", w("tok"), "--out", w("killed")});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(ws() / "killed" / "manifest.json"));
  EXPECT_FALSE(fs::exists(ws() / "killed" / ".prepare.tmp"));
}

// Item 14: prepare --force over a shards folder leaves only the shards the new manifest lists
// (before, the previous corpus's shards stayed beside it); other files are left alone.
TEST_F(FirstHour, PrepareForceRemovesShardsTheNewManifestDoesNotList) {
  copy_in("tok");
  copy_in("shards");
  spit(ws() / "shards" / "notes.txt", "keep me\n");
  spit(ws() / "small" / "en.txt", "one small English document\nand a second one\nand a third\n");
  spit(ws() / "small" / "corpus.json", R"({"sources": [{"paths": ["en.txt"], "format": "lines", "lang": "en"}]})");
  size_t before = 0;
  for (const auto& e : fs::directory_iterator(ws() / "shards")) before += e.path().extension() == ".lmtok";
  Result r = prepare(w("small/corpus.json"));
  ASSERT_EQ(r.rc, 0) << r.err;
  auto manifest = lm::read_json_file(w("shards/manifest.json"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::set<std::string> listed, found;
  for (const auto& s : (*manifest)["shards"]) listed.insert(s["path"].get<std::string>());
  for (const auto& e : fs::directory_iterator(ws() / "shards"))
    if (e.path().extension() == ".lmtok") found.insert(e.path().filename().string());
  EXPECT_EQ(found, listed);
  EXPECT_LT(found.size(), before);
  EXPECT_EQ(slurp(ws() / "shards" / "notes.txt"), "keep me\n");
}

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
