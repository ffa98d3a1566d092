// Device peaks for MFU, and mixed precision.
#pragma once

#include <torch/torch.h>

#include "model/autocast.h"

#include <string>
#include <vector>

namespace lm::train {

// A measured matmul ceiling: n×n×n products in `windows` back-to-back windows of seconds/windows
// each (>= 1 s in all by default). Each window's FLOP/s is its products over its wall time, so a
// product the scheduler delayed costs one window, not the figure; `best` is the fastest window.
struct PeakMeasurement {
  double best = 0;              // FLOP/s of the fastest window (0: nothing could be timed)
  double median = 0;            // of the windows
  std::vector<double> windows;  // FLOP/s of each window, in order
  double seconds = 0;           // timed in all
  std::string how;              // "bf16 matmul 1024^3, best of 5 windows over 1.0 s"
};

// The two MFUs lmforge reports, named the same everywhere (metrics.jsonl, fit's log, the bench,
// scripts/gpu-check.sh, docs/gpu.md "What MFU means"):
//   mfu                against `flops`: the vendor's data-sheet peak on a GPU (the convention of
//                      PaLM appendix B, llm.c, torchtitan); on a CPU, which has no data sheet, the
//                      measured matmul ceiling;
//   mfu_measured_peak  against `measured`: the matmul ceiling timed on this device at start-up.
struct DevicePeak {
  double flops = 0;         // FLOP/s `mfu` divides by, 0 = unknown
  std::string source;       // "table: NVIDIA H100 80GB HBM3", "measured fp32 matmul 1024^3, ...", "override ..."
  double measured = 0;      // FLOP/s `mfu_measured_peak` divides by, 0 = not measured
  std::string measured_how; // PeakMeasurement::how
  std::string warning;      // judge_peak's: why the measured ceiling looks wrong ("" = plausible)
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

// Both peaks of `device` for `dtype`. CUDA: `flops` from the table by the device's name (H100/H200
// 989 TFLOP/s bf16, A100 312, L40S 362, RTX 4090 165), `measured` timed with 8192^3 products;
// CPU: both the measured ceiling (1024^3). `override_flops` > 0 (train.logging.peak_flops) is
// used for both and nothing is measured. `seconds`: the measurement's length (>= 1 s by default);
// `n` > 0: another matmul size.
DevicePeak device_peak(const torch::Device& device, torch::ScalarType dtype, double override_flops,
                       double seconds = 1.0, int64_t n = 0);

// The matmul ceiling of `device` in `dtype` (see PeakMeasurement).
PeakMeasurement measure_matmul_peak(const torch::Device& device, torch::ScalarType dtype, int64_t n,
                                    double seconds = 1.0, int windows = 5);

// Whether a measured ceiling can be believed: "" when it can, else why not (0 FLOP/s, windows that
// disagree by more than 2x: a busy machine, or far from the data sheet's `spec_flops` when known).
std::string judge_peak(const PeakMeasurement& m, double spec_flops);

// TF32 for fp32 work on CUDA: cuBLAS matmuls (float32 matmul precision "high") and cuDNN
// convolutions. bf16 autocast runs the matmuls in bf16 already; TF32 speeds up what stays fp32
// (fp32 runs, ops autocast keeps in fp32). A process-wide switch, set once by fit.
void set_tf32(bool on);
// What the switch says now: "on" or "off" (for the start-up lines).
bool tf32_enabled();

// The most bytes the caching allocator has had allocated on a CUDA device since the process
// started (tensors, not its reserve); 0 on a CPU or without CUDA.
int64_t device_peak_allocated_bytes(const torch::Device& device);

// bf16 autocast for a scope (model/autocast.h, shared with evaluation).
using AutocastGuard = model::AutocastGuard;

}  // namespace lm::train
