// A CPU allocator that counts: installed in place of LibTorch's CPU allocator for its lifetime, it
// forwards every allocation to the one it replaced and keeps the bytes live now and at the peak.
// What `lmtrain plan` promises is checked against it (tests/train/plan_memory_test.cpp): every
// tensor the model, autocast, autograd and the optimizer make on the CPU goes through it.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace lm::testing {

class CountingCpuAllocator final : public c10::Allocator {
 public:
  CountingCpuAllocator() : base_(c10::GetCPUAllocator()) {
    c10::SetCPUAllocator(this, kPriority);
    reset_peak();
  }
  // Blocks made while it was installed may outlive it: their deleter needs only the shared table.
  ~CountingCpuAllocator() override { c10::SetCPUAllocator(base_, kPriority); }
  CountingCpuAllocator(const CountingCpuAllocator&) = delete;
  CountingCpuAllocator& operator=(const CountingCpuAllocator&) = delete;

  // The data pointer is its own context, as raw_allocate (oneDNN's and BLAS's scratch) requires.
  c10::DataPtr allocate(size_t n) override {
    void* data = c10::alloc_cpu(n);
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    t.size[data] = n;
    t.live += static_cast<int64_t>(n);
    t.peak = std::max(t.peak, t.live);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  int64_t live() const { return locked([](Table& t) { return t.live; }); }
  int64_t peak() const { return locked([](Table& t) { return t.peak; }); }
  void reset_peak() {
    locked([](Table& t) { return t.peak = t.live; });
  }

 private:
  static constexpr uint8_t kPriority = 200;
  // Bytes live in blocks this allocator made (blocks from before it are not counted).
  struct Table {
    std::mutex mu;
    std::unordered_map<void*, size_t> size;
    int64_t live = 0, peak = 0;
  };
  static Table& table() {
    static Table* t = new Table;  // never destroyed: a tensor may be freed at exit
    return *t;
  }
  template <class F>
  static int64_t locked(F f) {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    return f(t);
  }
  static void release(void* data) {
    if (data == nullptr) return;
    {
      Table& t = table();
      std::lock_guard<std::mutex> lock(t.mu);
      auto it = t.size.find(data);
      if (it != t.size.end()) {
        t.live -= static_cast<int64_t>(it->second);
        t.size.erase(it);
      }
    }
    c10::free_cpu(data);
  }
  c10::Allocator* base_;
};

}  // namespace lm::testing
