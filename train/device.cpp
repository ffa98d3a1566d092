#include "train/device.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"

#if defined(LM_HAVE_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace lm::train {

namespace {
using Clock = std::chrono::steady_clock;

// FLOP/s of one window: products of a and b until `seconds` passed (checked after each product on
// a CPU, after every 8 on a GPU, where the host waits for them).
double window_flops(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c, double seconds, bool cuda) {
  const double per = 2.0 * static_cast<double>(a.size(0)) * static_cast<double>(a.size(1)) * static_cast<double>(b.size(1));
  const int batch = cuda ? 8 : 1;
  int64_t count = 0;
  double dt = 0;
  const auto t0 = Clock::now();
  do {
    for (int i = 0; i < batch; ++i) torch::mm_out(c, a, b);
    if (cuda) torch::cuda::synchronize();
    count += batch;
    dt = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (dt < seconds);
  return static_cast<double>(count) * per / dt;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

PeakMeasurement measure_matmul_peak(const torch::Device& device, torch::ScalarType dtype, int64_t n, double seconds,
                                    int windows) {
  torch::NoGradGuard no_grad;
  const bool cuda = device.is_cuda();
  auto opts = torch::TensorOptions().device(device);
  auto a = torch::randn({n, n}, opts).to(dtype), b = torch::randn({n, n}, opts).to(dtype);
  auto c = torch::matmul(a, b);  // warm-up: oneDNN primitive creation, cuBLAS handle and heuristics
  if (cuda) torch::cuda::synchronize();
  PeakMeasurement m;
  windows = std::max(windows, 1);
  const auto t0 = Clock::now();
  for (int w = 0; w < windows; ++w) m.windows.push_back(window_flops(a, b, c, seconds / windows, cuda));
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.best = *std::max_element(m.windows.begin(), m.windows.end());
  m.median = median_of(m.windows);
  m.how = absl::StrFormat("%s matmul %d^3, best of %d windows over %.1f s", dtype == torch::kBFloat16 ? "bf16" : "fp32",
                          n, windows, m.seconds);
  return m;
}

std::string judge_peak(const PeakMeasurement& m, double spec_flops) {
  if (!(m.best > 0) || !std::isfinite(m.best))
    return absl::StrFormat("the measured ceiling is %.1f TFLOP/s: nothing could be timed (%s); MFU against it is not "
                           "reported", m.best / 1e12, m.how);
  const double lo = *std::min_element(m.windows.begin(), m.windows.end());
  if (m.best > 2 * lo)
    return absl::StrFormat("the measured ceiling's windows differ by %.1fx (%.3g to %.3g TFLOP/s): the machine is busy, "
                           "so the ceiling (the best window) and MFU against it are uncertain",
                           m.best / std::max(lo, 1.0), lo / 1e12, m.best / 1e12);
  if (spec_flops > 0 && m.best < 0.5 * spec_flops)
    return absl::StrFormat("the measured ceiling %.0f TFLOP/s is below half the data sheet's %.0f: a shared, throttled "
                           "or misidentified GPU (train.logging.peak_flops sets the peak by hand)",
                           m.best / 1e12, spec_flops / 1e12);
  if (spec_flops > 0 && m.best > 1.15 * spec_flops)
    return absl::StrFormat("the measured ceiling %.0f TFLOP/s is above the data sheet's %.0f: the table's row is wrong "
                           "for this device (train/device.cpp)", m.best / 1e12, spec_flops / 1e12);
  return "";
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

DevicePeak device_peak(const torch::Device& device, torch::ScalarType dtype, double override_flops, double seconds,
                       int64_t n) {
  if (override_flops > 0) {
    const std::string how = "override (train.logging.peak_flops), not measured";
    return {override_flops, how, override_flops, how, ""};
  }
  DevicePeak p;
  double spec = 0;
  if (device.is_cuda()) {
    const std::string name = gpu_name();
    if (const GpuSpec* g = find_gpu(name)) {
      spec = dtype == torch::kBFloat16 ? g->bf16_flops : g->tf32_flops;
      p.flops = spec;
      p.source = "data sheet: " + name;
    } else {
      p.source = "unknown GPU '" + name + "' (set train.logging.peak_flops)";
    }
  }
  const PeakMeasurement m = measure_matmul_peak(device, dtype, n > 0 ? n : device.is_cuda() ? 8192 : 1024, seconds);
  p.warning = judge_peak(m, spec);
  // A ceiling of 0 is no ceiling: MFU against it is left out rather than shown as infinite.
  p.measured = m.best > 0 && std::isfinite(m.best) ? m.best : 0;
  p.measured_how = "measured " + m.how;
  if (device.is_cpu()) {  // no data sheet for a CPU: `mfu` is against the measured ceiling too
    p.flops = p.measured;
    p.source = p.measured_how;
  }
  return p;
}

void set_tf32(bool on) {
  at::globalContext().setFloat32MatmulPrecision(on ? "high" : "highest");
  at::globalContext().setAllowTF32CuDNN(on);
}

bool tf32_enabled() { return at::globalContext().allowTF32CuBLAS() && at::globalContext().allowTF32CuDNN(); }

int64_t device_peak_allocated_bytes(const torch::Device& device) {
#if defined(LM_HAVE_CUDA)
  if (!device.is_cuda() || !torch::cuda::is_available()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
#else
  (void)device;
  return 0;
#endif
}

}  // namespace lm::train
