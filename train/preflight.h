// Checks fit makes before its run folder holds anything (issue 40 items 8-9): sizes that cannot
// work are refused with the field and a fix, not found out by an allocator's stack trace minutes
// in; a schedule that never leaves its warmup is said.
#pragma once

#include <string>

#include "core/status.h"
#include "model/config.h"
#include "train/config.h"

namespace lm::train {

// Bytes one training step holds at once on `device` ("cpu" or "cuda"): fp32 weights, gradients and
// AdamW's two moments (16 bytes a parameter) and one micro-batch's saved activations
// (activation_bytes, train/plan.h: bf16 under autocast; twice that in fp32).
double train_step_bytes(const model::ModelConfig& m, const TrainConfig& tc);

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
double available_host_memory();

// FailedPrecondition when train_step_bytes is above `available` bytes (> 0; `where` says whose):
// names micro_batch and seq_len, both sizes, and the largest micro-batch that fits.
absl::Status check_step_fits(const model::ModelConfig& m, const TrainConfig& tc, double available,
                             const std::string& where);

// "" unless the warmup is at least as long as the run (the lr never reaches its peak).
std::string warmup_warning(const TrainConfig& tc);

// What fit runs once its config is resolved and before it writes: check_step_fits against this
// machine's available memory on cpu (a GPU's memory is not checked yet), and the warmup warning.
absl::Status preflight(const model::ModelConfig& m, const TrainConfig& tc);

}  // namespace lm::train
