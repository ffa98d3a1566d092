// Logging and progress output for people: a live line with rate and ETA on a terminal,
// plain periodic lines otherwise (CI=true, pipes, --quiet).
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>

#include "absl/strings/str_format.h"

namespace lm {

// Global output switches, set once by the programs' mains. Three levels of info: the default log
// says what a person needs at a glance (a handful of start-up lines, progress, results); -v adds
// the details behind them (each start-up check, versions, timings); -q keeps only warnings and
// errors, and wins over -v. Warnings and errors are printed at every level.
struct OutputOptions {
  bool quiet = false;        // only warnings and errors
  bool verbose = false;      // log_detail lines too (ignored under quiet)
  bool interactive = false;  // stderr is a terminal and CI is not set
};
OutputOptions& output_options();
void init_output(bool quiet, bool verbose = false);
// Whether log_detail prints (verbose and not quiet).
bool detail_enabled();

void log_line(const std::string& level, const std::string& msg);

template <typename... Args>
void log_info(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (!output_options().quiet) log_line("info", absl::StrFormat(fmt, args...));
}
// Details under -v: each start-up check, the version report, per-phase timings.
template <typename... Args>
void log_detail(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (detail_enabled()) log_line("info", absl::StrFormat(fmt, args...));
}
template <typename... Args>
void log_warn(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  log_line("warn", absl::StrFormat(fmt, args...));
}

// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);
// "12.3k", "4.56M", "1.20B".
std::string format_count(double value);
// "2026-12-07 04:29:46 UTC": the time of day a run folder records (lock holder, report).
std::string utc_time(std::time_t t);
// This machine's host name, or `fallback` when it cannot be read.
std::string host_name(const std::string& fallback);

// Progress over a known total (bytes, tokens, steps): rate and ETA. `start` is what was done
// before this process began (a resumed run's steps): the rate and ETA count from it, so a resume
// reports this invocation's speed, not the whole run's steps over this invocation's time.
class Progress {
 public:
  Progress(std::string label, double total, std::string unit, double start = 0);
  // The line for `done` of `total` after `elapsed_s` seconds of this process: percentage, amount,
  // rate over (done - start), then the ETA (or, final, the time taken) and `extra`.
  static std::string line(const std::string& label, double done, double total, const std::string& unit, double start,
                          double elapsed_s, bool final_line, const std::string& extra);
  // Sets the amount done; `extra` is appended to the line (e.g. "loss 3.21").
  void update(double done, const std::string& extra = "");
  void finish(const std::string& extra = "");
  double elapsed_s() const;

 private:
  void print(double done, const std::string& extra, bool final_line);
  std::string label_;
  double total_;
  std::string unit_;
  double start_done_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  bool printed_ = false;
};

}  // namespace lm
