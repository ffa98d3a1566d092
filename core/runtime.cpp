#include "core/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>
#include <ATen/Context.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"

namespace lm {
namespace {
std::atomic<int> g_stop{0};

void on_signal(int signo) {
  if (g_stop.load() == signo) _exit(128 + signo);  // second signal: user insists
  g_stop.store(signo);
}
}  // namespace

int setup_threads(int requested) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
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
  // Debian's LibTorch says BLAS_INFO=generic: the BLAS really used is whichever libblas the
  // alternatives system resolves, so name the library that is mapped into this process.
  std::string blas_lib = "?";
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[4096];
    while (std::fgets(line, sizeof(line), maps)) {
      std::string l(line);
      if (l.find("blas") == std::string::npos) continue;
      auto slash = l.find('/');
      if (slash == std::string::npos) continue;
      blas_lib = l.substr(slash);
      if (!blas_lib.empty() && blas_lib.back() == '\n') blas_lib.pop_back();
      if (blas_lib.find("openblas") != std::string::npos || blas_lib.find("mkl") != std::string::npos) break;
    }
    std::fclose(maps);
  }
  return absl::StrFormat("torch %s, intra-op threads %d, BLAS %s (%s), mkldnn/oneDNN %s",
                         TORCH_VERSION, at::get_num_threads(), pick("BLAS_INFO="), blas_lib,
                         at::hasMKLDNN() ? "yes" : "no");
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop.load(); }
void request_stop(int signo) { g_stop.store(signo); }

}  // namespace lm
