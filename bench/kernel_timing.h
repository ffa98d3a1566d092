// train_step_bench --mode kernels: each of lmforge's own CUDA kernels (model/fused_ops.h) timed
// forward + backward against its reference ops at a preset's shapes, with the bytes it moves, so
// that one GPU run decides each kernel's default on its own (scripts/gpu-check.sh, stage
// `kernels`). On a CPU, or in a build without the kernels, only the references are timed.
#pragma once

#include <torch/torch.h>

#include "core/config.h"
#include "model/config.h"

namespace lm::bench {

// One JSON object: {"mode": "kernels", "device", "dtype", "ops": [{"op", "shape", "ref_ms",
// "fast_ms", "speedup", "bytes", "fast_gbps", "max_rel_err"}, ...]}; fast_* null where the kernel
// cannot run. `iters` timed repetitions after 3 warm-ups, device synchronised around them.
Json time_own_kernels(const model::ModelConfig& cfg, int64_t batch, int64_t seq, torch::Device device,
                      torch::ScalarType dtype, int iters);

}  // namespace lm::bench
