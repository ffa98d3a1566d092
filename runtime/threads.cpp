#include "runtime/threads.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lm {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string describe(const ThreadChoice& c, int cores, const std::string& what) {
  std::vector<std::string> times;
  for (size_t i = 0; i < c.candidates.size(); ++i)
    times.push_back(absl::StrFormat("%.1f ms on %d", 1e3 * c.median_s[i], c.candidates[i]));
  return absl::StrFormat("threads: %d of %d cores, the faster at start-up (%s: %s; probe %.2f s; --threads N forces N)",
                         c.threads, cores, what, absl::StrJoin(times, ", "), c.probe_s);
}

}  // namespace

ThreadChoice choose_threads(int requested, int cores, const std::function<ProbeTime(int)>& time_at,
                            const std::string& what, const ThreadProbeLimits& limits) {
  ThreadChoice c;
  if (requested > 0) {
    c.threads = requested;
    c.line = absl::StrFormat("threads: %d (--threads %d)", requested, requested);
    return c;
  }
  if (cores < 2) {
    c.line = "threads: 1 (one core)";
    return c;
  }
  c.candidates = {1, cores};
  std::vector<std::vector<double>> samples(c.candidates.size());
  c.probe_s = time_at(1).total_s;  // warm-up: first-touch allocations (not part of the choice)
  for (int round = 0; round < limits.rounds; ++round) {
    if (round >= limits.min_rounds && c.probe_s >= limits.budget_s) break;
    // ABBA order: a load that grows or fades during the probe favours neither count.
    for (size_t k = 0; k < c.candidates.size(); ++k) {
      const size_t i = round % 2 == 0 ? k : c.candidates.size() - 1 - k;
      const ProbeTime t = time_at(c.candidates[i]);
      samples[i].push_back(t.per_unit_s);
      c.probe_s += t.total_s;
    }
  }
  c.measured = true;
  for (const auto& s : samples) c.median_s.push_back(median(s));
  // All cores must be clearly faster: wrongly keeping one thread costs at most the cores' speed-up,
  // wrongly taking all of them on a busy machine costs 2-60x (issue 30 item 8).
  c.threads = c.median_s[1] < (1 - limits.margin) * c.median_s[0] ? cores : 1;
  c.line = describe(c, cores, what);
  return c;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadChoice set_threads_by_probe(int requested, const ProbeWork& work, const std::string& what,
                                  const ThreadProbeLimits& limits) {
  auto time_at = [&](int n) {
    at::set_num_threads(n);
    const auto t0 = std::chrono::steady_clock::now();
    const int units = std::max(1, work());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ProbeTime{s / units, s};
  };
  ThreadChoice c = choose_threads(requested, usable_cores(), time_at, what, limits);
  at::set_num_threads(c.threads);
  return c;
}

ThreadChoice set_threads_without_probe(int requested, const std::string& why) {
  ThreadChoice c;
  const int cores = usable_cores();
  c.threads = requested > 0 ? requested : cores;
  c.line = requested > 0 ? absl::StrFormat("threads: %d (--threads %d)", requested, requested)
                         : absl::StrFormat("threads: %d, all cores (%s)", cores, why);
  at::set_num_threads(c.threads);
  return c;
}

ThreadChoice set_threads_for(int requested, bool on_cpu, const ProbeWork& work, const std::string& what) {
  return on_cpu ? set_threads_by_probe(requested, work, what) : set_threads_without_probe(requested, "device cuda");
}

}  // namespace lm
