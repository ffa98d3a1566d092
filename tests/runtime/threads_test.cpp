// The thread-count choice (runtime/threads.h, issue 30 item 8): --threads forces; the default
// times a probe at 1 thread and at all cores and keeps the faster by the median of interleaved runs.
#include "runtime/threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

namespace {
using lm::choose_threads;
using lm::ThreadChoice;

// A scripted probe: each call at n threads returns the next of times[n] (the last one repeats)
// and records the order of the calls.
struct Script {
  std::map<int, std::vector<double>> times;
  std::map<int, size_t> next;
  std::vector<int> calls;
  lm::ProbeTime operator()(int n) {
    calls.push_back(n);
    const auto& t = times.at(n);
    const size_t i = std::min(next[n]++, t.size() - 1);
    return {t[i], t[i]};
  }
};

ThreadChoice choose(int requested, int cores, Script& s) {
  return choose_threads(requested, cores, [&](int n) { return s(n); }, "probe");
}

TEST(Threads, RequestedCountIsForcedWithoutAProbe) {
  Script s;
  const ThreadChoice c = choose(3, 8, s);
  EXPECT_EQ(c.threads, 3);
  EXPECT_FALSE(c.measured);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(c.line, "threads: 3 (--threads 3)");
}

TEST(Threads, OneCoreLeavesNothingToChoose) {
  Script s;
  const ThreadChoice c = choose(0, 1, s);
  EXPECT_EQ(c.threads, 1);
  EXPECT_TRUE(s.calls.empty());
}

// The loaded machine of the issue: all cores three times slower than one.
TEST(Threads, OneThreadWinsWhenAllCoresAreSlower) {
  Script s{{{1, {0.010}}, {2, {0.030}}}};
  const ThreadChoice c = choose(0, 2, s);
  EXPECT_TRUE(c.measured);
  EXPECT_EQ(c.threads, 1);
  EXPECT_NE(c.line.find("threads: 1 of 2 cores"), std::string::npos) << c.line;
  EXPECT_NE(c.line.find("10.0 ms on 1, 30.0 ms on 2; probe 0.13 s"), std::string::npos) << c.line;
}

TEST(Threads, AllCoresWinWhenFaster) {
  Script s{{{1, {0.020}}, {4, {0.006}}}};
  const ThreadChoice c = choose(0, 4, s);
  EXPECT_EQ(c.threads, 4);
  EXPECT_EQ(c.candidates, (std::vector<int>{1, 4}));
}

// One slow run (a burst of other load) decides neither way: the median of the timed runs does.
// all cores: 90, 5, 5 ms -> median 5 ms; one thread: 8 ms each (after a 50 ms warm-up). A mean
// (33 ms) or the first timed run (90 ms) would pick one thread.
TEST(Threads, MedianIgnoresOneSlowRun) {
  Script s{{{1, {0.050, 0.008}}, {2, {0.090, 0.005, 0.005}}}};
  const ThreadChoice c = choose(0, 2, s);
  EXPECT_EQ(c.threads, 2);
  ASSERT_EQ(c.median_s.size(), 2u);
  EXPECT_NEAR(c.median_s[1], 0.005, 1e-12);
}

// One warm-up, then rounds in ABBA order, so a load that grows during the probe favours neither
// count.
TEST(Threads, RunsInterleaveAfterAWarmUp) {
  Script s{{{1, {0.001}}, {2, {0.002}}}};
  choose(0, 2, s);
  EXPECT_EQ(s.calls, (std::vector<int>{1, 1, 2, 2, 1, 1, 2}));
}

// A slow probe (a big model on a slow CPU) stops after one timed round once the budget is spent.
TEST(Threads, BudgetShortensASlowProbe) {
  Script s{{{1, {0.5}}, {2, {0.3}}}};
  const ThreadChoice c = choose(0, 2, s);
  EXPECT_EQ(s.calls.size(), 3u);
  EXPECT_EQ(c.threads, 2);
  EXPECT_NEAR(c.probe_s, 1.3, 1e-9);
}

// All cores must be clearly faster (10 %): wrongly taking them on a busy machine costs far more
// than wrongly keeping one thread on an idle one.
TEST(Threads, AllCoresMustBeClearlyFaster) {
  Script tie{{{1, {0.004}}, {2, {0.004}}}};
  EXPECT_EQ(choose(0, 2, tie).threads, 1);
  Script close{{{1, {0.010}}, {2, {0.0095}}}};
  EXPECT_EQ(choose(0, 2, close).threads, 1);
  Script clear{{{1, {0.010}}, {2, {0.0085}}}};
  EXPECT_EQ(choose(0, 2, clear).threads, 2);
}

// The real setter: LibTorch's intra-op count ends at the choice. The probe's work is slow whenever
// it runs on more than one thread, so the default must leave one.
TEST(Threads, SetterLeavesLibTorchOnTheChoice) {
  const int saved = at::get_num_threads();
  auto slow_when_parallel = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(at::get_num_threads() > 1 ? 20 : 2));
    return 1;
  };
  ThreadChoice c = lm::set_threads_by_probe(2, slow_when_parallel, "sleep");
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_FALSE(c.measured);
  c = lm::set_threads_by_probe(0, slow_when_parallel, "sleep");
  EXPECT_EQ(c.threads, 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  if (lm::usable_cores() >= 2) {
    EXPECT_TRUE(c.measured);
    auto slow_when_serial = [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(at::get_num_threads() > 1 ? 2 : 20));
      return 1;
    };
    c = lm::set_threads_by_probe(0, slow_when_serial, "sleep");
    EXPECT_EQ(c.threads, lm::usable_cores());
    EXPECT_EQ(at::get_num_threads(), lm::usable_cores());
  }
  at::set_num_threads(saved);
}

// A probe of several units (decode steps) is compared per unit: 4 units of 3 ms on one thread
// beat 2 units of 5 ms on all cores (10 ms in all, less than 12, but slower per unit).
TEST(Threads, SetterComparesPerUnitOfWork) {
  if (lm::usable_cores() < 2) GTEST_SKIP() << "one core: nothing to choose";
  const int saved = at::get_num_threads();
  auto work = [] {
    const bool parallel = at::get_num_threads() > 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(parallel ? 10 : 12));
    return parallel ? 2 : 4;
  };
  EXPECT_EQ(lm::set_threads_by_probe(0, work, "units").threads, 1);
  at::set_num_threads(saved);
}

}  // namespace
