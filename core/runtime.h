// Process-wide runtime set-up: threads (intra-op, OpenMP, oneDNN) and stop signals.
#pragma once

#include <string>

namespace lm {

// Sets LibTorch's intra-op threads (0 = all cores) and returns the number in use.
// LibTorch here starts at 1 thread, so every program calls this.
int setup_threads(int requested);

// One line naming the BLAS, oneDNN and OpenMP in use, as LibTorch reports them.
std::string backend_summary();

// SIGINT/SIGTERM set a flag instead of killing the process, so a training step can finish
// and checkpoint. A second signal of the same kind exits at once.
void install_stop_handlers();
// 0 while no stop was requested, else the signal number.
int stop_signal();
// For tests: pretend a signal arrived.
void request_stop(int signo);

}  // namespace lm
