// Issue 30 item 8: with the default --threads 0, fit, nll, mc and sample chose all cores however
// loaded the machine was, and said nothing. Now each measures 1 thread against all cores at
// start-up and says which it keeps in one line; --threads N still forces N.
#include <sched.h>

#include "tests/soak/cli_harness.h"

namespace {
using namespace lm_cli_test;

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

class Threads : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    if (IsSkipped()) return;
    copy_in("shards"); copy_in("tok"); copy_in("run.json"); copy_in("ref");
  }
  // The command as a user types it: no --threads, no -q (the thread line is on the default log).
  Result plain(const std::string& program, std::vector<std::string> args) {
    args.insert(args.begin(), program);
    return run(args, logs());
  }
};

// The line names the count kept and, where there was a choice, both timings. (mc loads its model
// the way nll does: eval/evaluate.cpp load_models.)
// fit says it on its device line ("device cpu (...), dtype ..., TF32 ...; threads: ..."), the
// evaluation commands on a line of its own.
size_t find_threads(const std::string& err) {
  for (const char* at : {"] threads: ", "; threads: "})
    if (auto p = err.find(at); p != std::string::npos) return p;
  return std::string::npos;
}

void expect_choice_said(const Result& r) {
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto at = find_threads(r.err);
  ASSERT_NE(at, std::string::npos) << "no thread line in: " << r.err;
  const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  if (usable_cores() >= 2) {
    EXPECT_NE(line.find(" cores, the faster at start-up ("), std::string::npos) << line;
    EXPECT_NE(line.find(" ms on 1, "), std::string::npos) << line;
  }
}

TEST_F(Threads, EveryModelCommandSaysTheCountItChoseByMeasurement) {
  const std::vector<std::string> fit = {"fit", "--data", w("shards"), "--config", w("run.json"), "--preset", "tiny",
                                        "--tokenizer", w("tok"), "--steps", "2", "--out", w("new")};
  expect_choice_said(plain(kLmtrain, fit));
  expect_choice_said(plain(kLmeval, {"nll", "--run", w("ref"), "--data", w("shards"), "--max-tokens", "256"}));
  expect_choice_said(plain(kLmeval, {"sample", "--run", w("ref"), "--prompt", "a", "--max-new-tokens", "2"}));
}

TEST_F(Threads, TheFlagStillForcesTheCount) {
  Result r = plain(kLmeval, {"sample", "--run", w("ref"), "--prompt", "a", "--max-new-tokens", "2", "--threads", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("] threads: 1 (--threads 1)"), std::string::npos) << r.err;
}

}  // namespace
