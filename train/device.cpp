#include "train/device.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

#include <cctype>
#include <chrono>
#include <cstdio>

namespace lm::train {

double measure_matmul_flops(torch::ScalarType dtype, int64_t n, double seconds) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  auto c = torch::matmul(a, b);  // warm-up (oneDNN primitive creation)
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    c = torch::matmul(a, b);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / dt);
  }
  return best;
}

namespace {
std::string gpu_name() {
  FILE* p = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1", "r");
  if (p == nullptr) return "";
  char buf[256] = {0};
  std::string s = fgets(buf, sizeof(buf), p) ? buf : "";
  pclose(p);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

const std::vector<GpuSpec>& gpu_table() {
  // Dense peaks from the vendors' data sheets (no sparsity); H200 has H100's compute.
  static const std::vector<GpuSpec> table = {
      {"h200", "NVIDIA H200", 989e12, 494e12, 141e9},
      // PCIe and NVL cards run lower clocks and power than SXM: matched before the plain "h100"
      // (the SXM module's nvidia-smi name, "NVIDIA H100 80GB HBM3"), so MFU is not flattered.
      {"h100 pcie", "NVIDIA H100 PCIe", 756e12, 378e12, 80e9},
      {"h100 nvl", "NVIDIA H100 NVL", 835e12, 418e12, 94e9},
      {"h100", "NVIDIA H100 SXM", 989e12, 494e12, 80e9},
      {"a100", "NVIDIA A100 80GB", 312e12, 156e12, 80e9},
      {"l40s", "NVIDIA L40S", 362e12, 183e12, 48e9},
      {"4090", "NVIDIA RTX 4090", 165e12, 82.6e12, 24e9},
      {"a10", "NVIDIA A10", 125e12, 62.5e12, 24e9},
  };
  return table;
}

const GpuSpec* find_gpu(const std::string& name) {
  std::string lower = name;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const auto& g : gpu_table()) {
    if (lower.find(g.key) != std::string::npos) return &g;
  }
  return nullptr;
}

DevicePeak device_peak(const torch::Device& device, torch::ScalarType dtype, double override_flops) {
  if (override_flops > 0) return {override_flops, "override (train.peak_flops)"};
  if (device.is_cpu()) {
    const double f = measure_matmul_flops(dtype, 1024, 0.3);
    return {f, std::string("measured ") + (dtype == torch::kBFloat16 ? "bf16" : "fp32") + " matmul 1024^3"};
  }
  const std::string name = gpu_name();
  if (const GpuSpec* g = find_gpu(name))
    return {dtype == torch::kBFloat16 ? g->bf16_flops : g->tf32_flops, "table: " + name};
  return {0, "unknown GPU '" + name + "' (set train.peak_flops)"};
}

void set_tf32(bool on) {
  at::globalContext().setFloat32MatmulPrecision(on ? "high" : "highest");
  at::globalContext().setAllowTF32CuDNN(on);
}

bool tf32_enabled() { return at::globalContext().allowTF32CuBLAS() && at::globalContext().allowTF32CuDNN(); }

AutocastGuard::AutocastGuard(const torch::Device& device, bool enabled)
    : enabled_(enabled), cuda_(device.is_cuda()) {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(cuda_ ? at::kCUDA : at::kCPU, true);
  at::autocast::set_autocast_dtype(cuda_ ? at::kCUDA : at::kCPU, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(cuda_ ? at::kCUDA : at::kCPU, false);
  at::autocast::clear_cache();
}

}  // namespace lm::train
