// What `lmtrain fit` says at start-up (issue 30 item 17). The default log has a handful of lines:
// device, dtype and threads; the model and its budget; the MFU ceiling; and one line that sums up
// the start-up checks with the time they took. Under -v: each check with its figures, the version
// report, and the time of each start-up phase. A check that fails is always printed in full.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace lm::train {

// One timed part of the start-up: "data open", "thread probe", "fast paths", "gradient flow",
// "peak measurement".
struct StartupPhase {
  std::string name;
  double seconds = 0;
};

// The clock starts when the log is made (set_up_run's first step: a FitRequest is made there).
class StartupLog {
 public:
  // Adds `seconds` to the phase `name` (a phase timed in two pieces adds up), in first-seen order.
  void add(const std::string& name, double seconds);
  double phases_s() const;  // the named phases together
  double wall_s() const;    // since the log was made
  const std::vector<StartupPhase>& phases() const { return phases_; }
  // "start-up phases: data open 0.05 s, thread probe 0.26 s, ..., the rest (config, model,
  // optimizer, folder) 0.31 s; 2.04 s in all" (-v).
  std::string phases_line() const;

 private:
  std::vector<StartupPhase> phases_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Times its scope as one phase of `log`.
class PhaseTimer {
 public:
  PhaseTimer(StartupLog& log, std::string name)
      : log_(log), name_(std::move(name)), t0_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() { log_.add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count()); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  StartupLog& log_;
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
};

// What the start-up checks found, for the one line that sums them up.
struct StartupChecks {
  bool enabled = true;                 // train.debug.verify_at_start
  int fast_paths = 0;                  // fast paths checked against their reference
  std::vector<std::string> fell_back;  // of which switched to the reference
  bool gradient_flow = false;          // checked (a new run; a resume was checked at its step 0)
  int parameters = 0;                  // parameters the gradient flow check covered
};

// "start-up checks ok: 7 fast paths match their references, gradient flow reaches all 56 parameters;
// start-up took 2.0 s (-v lists each check and times each phase)"; with a fallback it names the
// paths. `seconds`: the whole start-up (StartupLog::wall_s).
std::string checks_line(const StartupChecks& c, double seconds);

}  // namespace lm::train
