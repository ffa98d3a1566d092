// How many CPU threads a command runs on: `--threads N` forces N; the default (0) measures.
//
// All cores is the fastest choice on an idle machine and the slowest on a busy one: LibTorch's
// OpenMP regions wait for their slowest thread, and a thread that shares its core with another
// process arrives late at every region (issue 30 item 8: training 497 tok/s on all cores of a
// loaded 2-core machine vs 1,602 on one). So fit, nll, mc and sample time a short probe of their
// own work (a forward of the model at their shapes) at 1 thread and at all cores, keep the faster
// and say which in one line. The choice is made once, at start-up (docs/performance.md, "Threads").
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace lm {

// The probe's limits: one untimed warm-up, then `rounds` timed runs per candidate, fewer once the
// probe took `budget_s` (a big model on a slow CPU keeps its start-up short). All cores are kept
// only when their median is `margin` below one thread's.
struct ThreadProbeLimits {
  int rounds = 3;
  int min_rounds = 1;
  double budget_s = 0.3;
  double margin = 0.1;
};

struct ThreadChoice {
  int threads = 1;
  bool measured = false;        // false: forced by --threads, or nothing to choose between
  std::vector<int> candidates;  // the thread counts timed
  std::vector<double> median_s; // each candidate's median probe time
  double probe_s = 0;           // the probe's whole time (start-up cost)
  std::string line;             // the one line to print: the count and why
};

// One timed probe run: its seconds per unit of work (one forward) and in all.
struct ProbeTime {
  double per_unit_s = 0;
  double total_s = 0;
};

// The choice without side effects, for tests: requested > 0 forces it; `cores` < 2 leaves one;
// otherwise time_at(n) (one probe run on n threads) is called for 1 and `cores`, interleaved,
// and all cores win only by `limits.margin` (medians of per_unit_s; total_s counts against the
// budget). `what` names the probe.
ThreadChoice choose_threads(int requested, int cores, const std::function<ProbeTime(int)>& time_at,
                            const std::string& what, const ThreadProbeLimits& limits = {});

// The cores this process may run on (its CPU affinity; hardware_concurrency without one).
int usable_cores();

// choose_threads on this process: `work` is the probe; it runs some units of work (forwards) and
// returns how many. Sets LibTorch's intra-op threads to the choice and returns it.
using ProbeWork = std::function<int()>;
ThreadChoice set_threads_by_probe(int requested, const ProbeWork& work, const std::string& what,
                                  const ThreadProbeLimits& limits = {});

// Where no probe applies (a CUDA device: the CPU threads feed it, they do not compute): requested > 0
// forces it, else all usable cores. Sets them and returns the line to print.
ThreadChoice set_threads_without_probe(int requested, const std::string& why);

// The two above by device: the probe on a CPU, all cores beside a CUDA device.
ThreadChoice set_threads_for(int requested, bool on_cpu, const ProbeWork& work, const std::string& what);

}  // namespace lm
