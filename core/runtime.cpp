#include "core/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>
#include <ATen/Context.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
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
  return absl::StrFormat("torch %s, intra-op threads %d, BLAS_INFO=%s, LAPACK=%s, mkldnn %s",
                         TORCH_VERSION, at::get_num_threads(), pick("BLAS_INFO="),
                         pick("LAPACK_INFO="), at::hasMKLDNN() ? "yes" : "no");
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
