#include "train/preflight.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "train/plan.h"

namespace lm::train {

double train_step_bytes(const model::ModelConfig& m, const TrainConfig& tc) {
  const double fixed = 16.0 * static_cast<double>(model::param_count(m));  // weights, grads, 2 AdamW moments
  const double act = activation_bytes(m, tc.batch.micro_batch, tc.batch.seq_len);
  return fixed + (tc.hardware.dtype == "bf16" ? act : 2 * act);
}

double available_host_memory() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    double kb = 0;
    if (in >> key >> kb && key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

absl::Status check_step_fits(const model::ModelConfig& m, const TrainConfig& tc, double available,
                             const std::string& where) {
  const double need = train_step_bytes(m, tc);
  if (!(available > 0) || need <= available) return absl::OkStatus();
  TrainConfig t = tc;
  int64_t fits = 0;
  for (t.batch.micro_batch = 1; t.batch.micro_batch <= tc.batch.micro_batch; t.batch.micro_batch *= 2) {
    if (train_step_bytes(m, t) > available) break;
    fits = t.batch.micro_batch;
  }
  const std::string fix = fits > 0 ? absl::StrFormat("--micro-batch %d or less (with --grad-accum for the same tokens "
                                                     "per step)", fits)
                                   : std::string("a shorter --seq-len or a smaller model");
  return absl::FailedPreconditionError(absl::StrFormat(
      "train.batch.micro_batch: %d x seq_len %d needs about %.3g GB for one step (weights, gradients, AdamW and the "
      "micro-batch's activations) but %s has %.3g GB available; use %s",
      tc.batch.micro_batch, tc.batch.seq_len, need / 1e9, where, available / 1e9, fix));
}

std::string warmup_warning(const TrainConfig& tc) {
  if (tc.schedule.warmup_steps < tc.steps || tc.schedule.kind == "constant") return "";
  return absl::StrFormat(
      "train.schedule.warmup_steps %d is not below train.steps %d: the whole run is warmup and the learning rate "
      "never reaches its peak %g (it ends at %g); lower it (--set schedule.warmup_steps=N) or train longer",
      tc.schedule.warmup_steps, tc.steps, tc.optimizer.lr, lr_at(tc, tc.steps - 1));
}

absl::Status preflight(const model::ModelConfig& m, const TrainConfig& tc) {
  if (tc.hardware.device == "cpu") LM_RETURN_IF_ERROR(check_step_fits(m, tc, available_host_memory(), "this machine"));
  if (const std::string w = warmup_warning(tc); !w.empty()) log_warn("%s", w);
  return absl::OkStatus();
}

}  // namespace lm::train
