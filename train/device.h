// Device peaks for MFU, and mixed precision.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace lm::train {

struct DevicePeak {
  double flops = 0;    // FLOP/s, 0 = unknown
  std::string source;  // "measured fp32 matmul", "table: NVIDIA H100", ...
};

// A GPU of the peak table: dense (no sparsity) tensor-core peaks from the vendors' data sheets
// and the memory of the common variant. lmtrain plan and device_peak read it.
struct GpuSpec {
  const char* key;   // matched case-insensitively as a substring of the device name: "h100"
  const char* name;  // "NVIDIA H100 SXM"
  double bf16_flops;
  double tf32_flops;
  double memory_bytes;
};
const std::vector<GpuSpec>& gpu_table();
// The row whose key occurs in `name` (case-insensitive), or nullptr.
const GpuSpec* find_gpu(const std::string& name);

// CPU: a matmul micro-benchmark in `dtype` (~0.3 s). CUDA: the dense bf16/fp32 figure from a
// table keyed by the device name (H100/H200 989 TFLOP/s bf16, A100 312, L40S 362, RTX 4090 165).
// `override_flops` > 0 wins.
DevicePeak device_peak(const torch::Device& device, torch::ScalarType dtype, double override_flops);

// CPU peak, measured: best of several n×n matmuls.
double measure_matmul_flops(torch::ScalarType dtype, int64_t n, double seconds);

// TF32 for fp32 work on CUDA: cuBLAS matmuls (float32 matmul precision "high") and cuDNN
// convolutions. bf16 autocast runs the matmuls in bf16 already; TF32 speeds up what stays fp32
// (fp32 runs, ops autocast keeps in fp32). A process-wide switch, set once by fit.
void set_tf32(bool on);
// What the switch says now: "on" or "off" (for the start-up lines).
bool tf32_enabled();

// Enables bf16 autocast on `device` for its lifetime (fp32 master weights stay fp32).
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, bool enabled);
  ~AutocastGuard();

 private:
  bool enabled_;
  bool cuda_;
};

}  // namespace lm::train
