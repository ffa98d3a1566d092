// The harness of the whole-program tests (bad_input_test.cpp, restart_test.cpp): runs the real
// lmtrain / lmeval with captured output and exit code, snapshots folders to prove a failed
// command changed nothing, and builds one shared workspace (tokenizers, shards, tiny runs) per
// build tree that each test copies from.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/file.h"

namespace lm_cli_test {
namespace fs = std::filesystem;
using lm::Json;

inline const std::string kLmtrain = LM_BINARY_DIR "/app/lmtrain";
inline const std::string kLmeval = LM_BINARY_DIR "/app/lmeval";
inline const std::string kSampleCorpus = LM_SOURCE_DIR "/data/sample/corpus.json";

struct Result {
  int rc = -1;  // exit status, or 128+N after signal N
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  auto s = lm::read_file(p.string());
  return s.ok() ? *s : std::string();
}

inline void spit(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// In a forked child: stdout and stderr into `out` and `err`, an optional file-size limit, then argv.
[[noreturn]] inline void exec_child(const std::vector<std::string>& argv, const std::string& out,
                                    const std::string& err, rlim_t fsize_limit) {
  const int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fo, 1);
  dup2(fe, 2);
  if (fsize_limit != RLIM_INFINITY) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {fsize_limit, fsize_limit};
    setrlimit(RLIMIT_FSIZE, &rl);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

// Runs argv[0] with argv, stdout and stderr captured in files under `logs`. `fsize_limit` sets
// RLIMIT_FSIZE in the child with SIGXFSZ ignored, so a write past it fails with EFBIG the way a
// full disk fails with ENOSPC (the product must handle both the same way).
inline Result run(const std::vector<std::string>& argv, const fs::path& logs, rlim_t fsize_limit = RLIM_INFINITY) {
  static int n = 0;
  fs::create_directories(logs);
  const fs::path out = logs / ("cmd" + std::to_string(n) + ".out"), err = logs / ("cmd" + std::to_string(n) + ".err");
  ++n;
  std::string line;
  for (const auto& a : argv) line += a + " ";
  const pid_t pid = fork();
  if (pid == 0) exec_child(argv, out.string(), err.string(), fsize_limit);
  int status = 0;
  waitpid(pid, &status, 0);
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  std::fprintf(stderr, "$ %s\n  -> exit %d\n%s", line.c_str(), r.rc, r.err.c_str());
  return r;
}

// Starts argv in the background (stdout/stderr into `logs`); the caller waits for it.
inline pid_t spawn(const std::vector<std::string>& argv, const fs::path& logs, const std::string& tag) {
  fs::create_directories(logs);
  const std::string out = (logs / (tag + ".out")).string(), err = (logs / (tag + ".err")).string();
  const pid_t pid = fork();
  if (pid == 0) exec_child(argv, out, err, RLIM_INFINITY);
  return pid;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Polls `ready` every 20 ms for up to `seconds`.
inline bool wait_for(const std::function<bool()>& ready, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Every regular file under `root`, relative path -> size and content hash.
using Snapshot = std::map<std::string, std::string>;
inline Snapshot snapshot(const fs::path& root) {
  Snapshot s;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const std::string bytes = slurp(e.path());
    s[fs::relative(e.path(), root).string()] =
        std::to_string(bytes.size()) + ":" + lm::hex64(lm::fnv1a64(bytes.data(), bytes.size()));
  }
  return s;
}

// No file that existed was changed or deleted; with !allow_new, none was added either (a failed
// command must not leave half an output behind).
inline void expect_unchanged(const Snapshot& before, const fs::path& root, bool allow_new = false) {
  const Snapshot after = snapshot(root);
  for (const auto& [p, h] : before) {
    auto it = after.find(p);
    if (it == after.end()) ADD_FAILURE() << p << " was deleted";
    else if (it->second != h) ADD_FAILURE() << p << " was changed";
  }
  if (!allow_new)
    for (const auto& [p, h] : after)
      if (!before.count(p)) ADD_FAILURE() << p << " was created";
}

#define EXPECT_BAD_INPUT(result, ...)                                               \
  do {                                                                              \
    const Result& r_ = (result);                                                    \
    EXPECT_EQ(r_.rc, 2) << r_.err;                                                  \
    for (const std::string& needle : std::vector<std::string>{__VA_ARGS__})         \
      EXPECT_NE(r_.err.find(needle), std::string::npos) << "want '" << needle << "' in: " << r_.err; \
  } while (0)

inline const char* kRunJson = R"({"train": {"steps": 9, "batch": {"micro_batch": 2, "seq_len": 32},
  "schedule": {"warmup_steps": 2}, "logging": {"interval": 1}, "checkpoint": {"interval": 3, "keep_last": 5},
  "eval": {"interval": 0}}})";

// Built once per build tree (ctest runs every test in its own process): a private folder is filled
// and renamed into place, so parallel test processes never see half a workspace.
inline const fs::path& shared_ws() {
  static const fs::path ws = [] {
    // Keyed by the lmtrain binary (size and modification time): a rebuilt lmtrain gets a fresh
    // workspace, so a change to what fit writes (the optimizer file's per-group steps, say) never
    // meets a reference written by an older binary (a hand-bumped version number once did).
    const auto stamp = static_cast<unsigned long long>(fs::last_write_time(kLmtrain).time_since_epoch().count());
    const std::string key = std::to_string(fs::file_size(kLmtrain)) + "-" + std::to_string(stamp);
    const fs::path soak = fs::path(LM_BINARY_DIR) / "tests" / "soak";
    const fs::path dir = soak / ("bad_input_ws_" + key);
    if (fs::exists(dir / "COMPLETE")) return dir;
    std::error_code ignored;  // earlier binaries' workspaces (best effort: nothing uses them now)
    for (const auto& e : fs::directory_iterator(soak, ignored))
      if (e.path().filename().string().rfind("bad_input_ws_", 0) == 0 &&
          e.path().filename().string().find(".tmp.") == std::string::npos)
        fs::remove_all(e.path(), ignored);
    const fs::path tmp = dir.string() + ".tmp." + std::to_string(getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    const fs::path logs = tmp / "logs";
    auto must = [&](const std::vector<std::string>& argv) {
      Result r = run(argv, logs);
      if (r.rc != 0) {
        std::fprintf(stderr, "workspace: failed (%d): %s\n", r.rc, r.err.c_str());
        std::abort();
      }
    };
    const std::string t = tmp.string();
    const std::vector<std::string> q = {"--threads", "2", "-q"};
    auto cmd = [&](std::vector<std::string> v) {
      v.insert(v.end(), q.begin(), q.end());
      return v;
    };
    must(cmd({kLmtrain, "tokenizer", "--corpus", kSampleCorpus, "--vocab-size", "512", "--out", t + "/tok"}));
    must(cmd({kLmtrain, "tokenizer", "--corpus", kSampleCorpus, "--vocab-size", "600", "--out", t + "/tok_other"}));
    must(cmd({kLmtrain, "prepare", "--corpus", kSampleCorpus, "--tokenizer", t + "/tok", "--out", t + "/shards"}));
    spit(tmp / "run.json", kRunJson);
    const std::vector<std::string> fit = {kLmtrain, "fit", "--data", t + "/shards", "--preset", "tiny",
                                          "--config", t + "/run.json"};
    auto fit_to = [&](const std::string& out, std::vector<std::string> extra) {
      auto v = fit;
      v.insert(v.end(), {"--out", out});
      v.insert(v.end(), extra.begin(), extra.end());
      return cmd(v);
    };
    // run: 9-step schedule stopped at step 6 (checkpoints 3 and 6); ref: the same 9 steps unbroken.
    must(fit_to(t + "/run", {"--stop-at-step", "6"}));
    must(fit_to(t + "/ref", {}));
    // other: another preset (small), 3 steps on the same shards.
    must(cmd({kLmtrain, "fit", "--data", t + "/shards", "--preset", "small", "--config", t + "/run.json", "--steps",
              "3", "--out", t + "/other"}));
    fs::remove_all(logs);
    spit(tmp / "COMPLETE", "");
    std::error_code ec;
    fs::rename(tmp, dir, ec);
    if (ec) fs::remove_all(tmp);  // another process got there first
    return dir;
  }();
  return ws;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kLmtrain) || !fs::exists(kLmeval)) GTEST_SKIP() << "lmtrain/lmeval not built";
    root_ = fs::temp_directory_path() / ("lm_bad_input_" + std::to_string(getpid())) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(ws());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(root_);
  }
  fs::path ws() const { return root_ / "ws"; }      // what the command may read (snapshotted)
  fs::path logs() const { return root_ / "logs"; }  // its stdout/stderr
  std::string w(const std::string& rel) const { return (ws() / rel).string(); }
  // Copies a part of the shared workspace into this test's own.
  void copy_in(const std::string& rel) {
    fs::copy(shared_ws() / rel, ws() / rel, fs::copy_options::recursive);
  }
  Result lmtrain(std::vector<std::string> args, rlim_t fsize = RLIM_INFINITY) {
    args.insert(args.begin(), kLmtrain);
    args.insert(args.end(), {"--threads", "2", "-q"});
    return run(args, logs(), fsize);
  }
  Result lmeval(std::vector<std::string> args) {
    args.insert(args.begin(), kLmeval);
    args.insert(args.end(), {"--threads", "2", "-q"});
    return run(args, logs());
  }
  // fit on the (copied) shards with the tiny preset (unless args name one) and the workspace's
  // run.json. The shards record the absolute path of the tokenizer they were made with, which is
  // the shared workspace's, so a new run names this test's copy (unless args name one); a resumed
  // run uses the copy inside its run folder.
  Result fit(std::vector<std::string> args, rlim_t fsize = RLIM_INFINITY) {
    auto has = [&](const char* flag) { return std::find(args.begin(), args.end(), flag) != args.end(); };
    std::vector<std::string> v = {"fit", "--data", w("shards"), "--config", w("run.json")};
    if (!has("--preset")) v.insert(v.end(), {"--preset", "tiny"});
    if (!has("--tokenizer") && !has("--resume")) v.insert(v.end(), {"--tokenizer", w("tok")});
    v.insert(v.end(), args.begin(), args.end());
    return lmtrain(v, fsize);
  }
  Result prepare(const std::string& corpus) {
    // --force: these tests write over the copied shards on purpose (a refused corpus must leave them).
    return lmtrain({"prepare", "--corpus", corpus, "--tokenizer", w("tok"), "--out", w("shards"), "--force"});
  }
  std::string latest_of(const std::string& run) const {
    std::string s = slurp(ws() / run / "latest");
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  fs::path root_;
};

}  // namespace lm_cli_test
