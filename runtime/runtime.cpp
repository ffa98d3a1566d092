#include "runtime/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#if defined(LM_HAVE_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif
#if defined(LM_HAVE_NCCL)
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#endif
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "core/signals.h"
#include "runtime/threads.h"
#include "runtime/torch_version.h"

namespace lm {
namespace {
std::atomic<int> g_stop{0};

void on_signal(int signo) {
  if (g_stop.load() == signo) _exit(128 + signo);  // second signal: user insists
  g_stop.store(signo);
}
}  // namespace

int setup_threads(int requested) {
  const int n = requested > 0 ? requested : usable_cores();
  at::set_num_threads(n);
  return at::get_num_threads();
}

std::string backend_summary() {
  std::string cfg = at::show_config();
  auto pick = [&](const std::string& key) -> std::string {
    auto pos = cfg.find(key);
    if (pos == std::string::npos) return "?";
    auto end = cfg.find_first_of(",\n", pos);
    return cfg.substr(pos + key.size(), end - pos - key.size());
  };
  // A LibTorch that says BLAS_INFO=generic (Debian's) uses whichever libblas the alternatives
  // system resolves, so name the CPU BLAS library mapped into this process; the wheel's MKL is
  // linked into libtorch_cpu.
  std::string blas_lib = "linked into LibTorch";
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[4096];
    while (std::fgets(line, sizeof(line), maps)) {
      std::string l(line);
      if (l.find("blas") == std::string::npos || l.find("cublas") != std::string::npos ||
          l.find("nvblas") != std::string::npos)
        continue;  // the GPU BLAS is not the CPU one
      auto slash = l.find('/');
      if (slash == std::string::npos) continue;
      blas_lib = l.substr(slash);
      if (!blas_lib.empty() && blas_lib.back() == '\n') blas_lib.pop_back();
      if (blas_lib.find("openblas") != std::string::npos || blas_lib.find("mkl") != std::string::npos) break;
    }
    std::fclose(maps);
  }
  return absl::StrFormat("torch %s, intra-op threads %d, BLAS %s (%s), mkldnn/oneDNN %s",
                         kTorchVersion, at::get_num_threads(), pick("BLAS_INFO="), blas_lib,
                         at::hasMKLDNN() ? "yes" : "no");
}

namespace {
// 13000 -> "13.0"; 91900 -> "9.19.0" (cuDNN 9 encodes major*10000 + minor*100 + patch).
std::string cuda_version_string(long v) { return absl::StrFormat("%d.%d", v / 1000, (v % 1000) / 10); }
std::string cudnn_version_string(long v) {
  return v >= 90000 ? absl::StrFormat("%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100)
                    : absl::StrFormat("%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}
}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.torch = kTorchVersion;
#if defined(LM_HAVE_CUDA)
  b.cuda_compiled = true;
  const auto& hooks = at::detail::getCUDAHooks();
  b.cuda = cuda_version_string(hooks.versionCUDART());
  if (hooks.versionCuDNN() > 0) b.cudnn = cudnn_version_string(hooks.versionCuDNN());
  b.gpus = static_cast<int>(hooks.deviceCount());
  if (b.gpus > 0) {
    const auto* p = at::cuda::getDeviceProperties(0);
    b.device = absl::StrFormat("cuda:0 of %d: %s (sm_%d%d, %.0f GiB)", b.gpus, p->name, p->major, p->minor,
                               static_cast<double>(p->totalGlobalMem) / (1 << 30));
  }
#endif
#if defined(LM_HAVE_NCCL)
  b.nccl_compiled = true;
  b.nccl = c10d::getNcclVersion();
#endif
  if (b.device.empty())
    b.device = b.cuda_compiled ? "cpu (no CUDA device visible)" : "cpu (CUDA not compiled in)";
  return b;
}

std::string version_report(const char* program) {
  const BuildInfo b = build_info();
  std::string cuda = b.cuda_compiled
                         ? absl::StrFormat("CUDA %s (cuDNN %s, NCCL %s) compiled in", b.cuda,
                                           b.cudnn.empty() ? "none" : b.cudnn,
                                           b.nccl_compiled ? b.nccl : "not compiled in")
                         : std::string("CUDA not compiled in");
  return absl::StrFormat("%s %s; LibTorch %s; %s; device %s\n%s", program, kLmforgeVersion, b.torch, cuda,
                         b.device, backend_summary());
}

void install_stop_handlers() { on_stop_signals(on_signal); }

int stop_signal() { return g_stop.load(); }
void request_stop(int signo) { g_stop.store(signo); }

}  // namespace lm
