// Process-wide runtime set-up: threads (intra-op, OpenMP, oneDNN) and stop signals.
#pragma once

#include <string>

namespace lm {

// Sets LibTorch's intra-op threads (0 = all usable cores) and returns the number in use.
// LibTorch here starts at 1 thread, so every program calls this; the commands that run a model
// then choose by measurement (runtime/threads.h).
int setup_threads(int requested);

// One line naming the BLAS, oneDNN and OpenMP in use, as LibTorch reports them.
std::string backend_summary();

inline constexpr const char* kLmforgeVersion = "0.1.0";

// What this binary was built with and what it finds at run time.
struct BuildInfo {
  std::string torch;            // "2.11.0+cu130"
  bool cuda_compiled = false;   // LibTorch with CUDA (the torch wheel)
  std::string cuda;             // CUDA runtime compiled in: "13.0"
  std::string cudnn;            // "9.19.0", "" without cuDNN
  bool nccl_compiled = false;   // ProcessGroupNCCL compiled in
  std::string nccl;             // NCCL that LibTorch loaded: "2.28.9"
  int gpus = 0;                 // CUDA devices visible now
  std::string device;           // "cuda:0 of 8: NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)" or "cpu (...)"
};
BuildInfo build_info();

// `lmtrain --version`, and the first lines of every fit: program, LibTorch, CUDA/cuDNN/NCCL
// compiled in, the device found, then backend_summary() (threads, BLAS, oneDNN).
std::string version_report(const char* program);

// SIGINT/SIGTERM set a flag instead of killing the process, so a training step can finish
// and checkpoint. A second signal of the same kind exits at once.
void install_stop_handlers();
// 0 while no stop was requested, else the signal number.
int stop_signal();
// For tests: pretend a signal arrived.
void request_stop(int signo);

}  // namespace lm
