#include "core/mapped_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace lm {

namespace {

// A fixed table the handler can read without locks or allocation: start is published last.
struct Slot {
  std::atomic<uintptr_t> start{0};
  size_t size = 0;
  char path[512] = {};
};
constexpr int kSlots = 4096;
Slot g_slots[kSlots];
std::mutex g_register_mu;  // registration only; the handler never takes it
std::atomic<int> g_fault{-1};
char g_fault_path[512] = {};

void on_sigbus(int sig, siginfo_t* info, void* /*ctx*/) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (int i = 0; i < kSlots; ++i) {
    const uintptr_t start = g_slots[i].start.load(std::memory_order_acquire);
    if (start == 0 || addr < start || addr >= start + g_slots[i].size) continue;
    const uintptr_t page = addr & ~static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE) - 1);
    // mmap is a plain system call on Linux; zeros replace the page that no longer has file data.
    void* p = ::mmap(reinterpret_cast<void*>(page), static_cast<size_t>(::sysconf(_SC_PAGESIZE)), PROT_READ,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    int none = -1;
    if (g_fault.compare_exchange_strong(none, i)) std::memcpy(g_fault_path, g_slots[i].path, sizeof g_fault_path);
    return;
  }
  // Not ours: the default action, at the same instruction again.
  ::signal(sig, SIG_DFL);
}

}  // namespace

void install_mapped_file_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

void register_mapping(const void* start, size_t size, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_register_mu);
  for (auto& s : g_slots) {
    if (s.start.load(std::memory_order_relaxed) != 0) continue;
    s.size = size;
    std::strncpy(s.path, path.c_str(), sizeof s.path - 1);
    s.path[sizeof s.path - 1] = '\0';
    s.start.store(reinterpret_cast<uintptr_t>(start), std::memory_order_release);
    return;
  }
  // Table full: that mapping is unguarded (a fault there is a bus error, as before).
}

void unregister_mapping(const void* start) {
  std::lock_guard<std::mutex> lock(g_register_mu);
  for (auto& s : g_slots)
    if (s.start.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(start)) s.start.store(0);
}

std::string mapped_file_fault() {
  if (g_fault.load(std::memory_order_acquire) < 0) return "";
  return g_fault_path;
}

}  // namespace lm
