#include "train/config.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace lm::train {

int64_t tokens_per_step(const TrainConfig& c, int world_size) {
  return c.micro_batch * c.seq_len * c.grad_accum * world_size;
}

TrainConfig preset_train_config(const std::string& preset) {
  const model::PresetTraining p = model::preset_training(preset);
  TrainConfig c;
  c.tokens = static_cast<int64_t>(p.tokens);
  c.steps = p.steps;
  c.micro_batch = p.micro_batch;
  c.seq_len = p.seq_len;
  c.batch_tokens = p.batch_tokens;
  c.lr = p.lr;
  c.warmup_steps = p.warmup_steps;
  c.min_lr_ratio = p.min_lr_ratio;
  c.weight_decay = p.weight_decay;
  c.eval_interval = p.eval_interval;
  c.checkpoint_interval = p.checkpoint_interval;
  c.checkpoint_minutes = p.checkpoint_minutes;
  return c;
}

void TrainOverrides::apply(TrainConfig& c) const {
  if (tokens) c.tokens = static_cast<int64_t>(*tokens);
  if (steps) { c.steps = *steps; c.tokens = 0; }
  if (lr) c.lr = *lr;
  if (micro_batch) c.micro_batch = *micro_batch;
  if (seq_len) c.seq_len = *seq_len;
  if (grad_accum) { c.grad_accum = *grad_accum; c.batch_tokens = 0; }
  if (batch_tokens) c.batch_tokens = *batch_tokens;
  if (stop_at_step) c.stop_at_step = *stop_at_step;
  if (checkpoint_interval) c.checkpoint_interval = *checkpoint_interval;
  if (checkpoint_minutes) c.checkpoint_minutes = *checkpoint_minutes;
  if (dtype) c.dtype = *dtype;
  if (device) c.device = *device;
  if (tf32) c.tf32 = *tf32;
}

void clear_shadowed(const Json& t, TrainConfig& c) {
  if (!t.is_object()) return;
  if (t.contains("steps") && !t.contains("tokens")) c.tokens = 0;
  if (t.contains("grad_accum") && !t.contains("batch_tokens")) c.batch_tokens = 0;
}

std::string resolve_hardware(TrainConfig& c, bool cuda_available) {
  std::string dev_why = "asked", dtype_why = "asked";
  if (c.device == "auto") {
    c.device = cuda_available ? "cuda" : "cpu";
    dev_why = cuda_available ? "auto: a CUDA device is visible" : "auto: no CUDA device visible";
  }
  if (c.dtype == "auto") {
    c.dtype = c.device == "cuda" ? "bf16" : "fp32";
    dtype_why = c.device == "cuda" ? "auto: bf16 autocast on cuda" : "auto: fp32 on cpu, --dtype bf16 to change";
  }
  const std::string tf32 = c.device != "cuda" ? "n/a on cpu"
                           : c.tf32           ? "on for fp32 matmuls (train.tf32; --tf32 off for exact fp32)"
                                              : "off (train.tf32 false)";
  return absl::StrFormat("device %s (%s), dtype %s (%s), TF32 %s", c.device, dev_why, c.dtype, dtype_why, tf32);
}

absl::Status resolve(TrainConfig& c, const model::ModelConfig& m, int world_size) {
  auto bad = [](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError("train." + field + ": " + why);
  };
  if (c.micro_batch <= 0) return bad("micro_batch", absl::StrCat("must be positive, got ", c.micro_batch));
  if (c.seq_len <= 0) return bad("seq_len", absl::StrCat("must be positive, got ", c.seq_len));
  if (c.seq_len > m.max_seq_len)
    return bad("seq_len", absl::StrCat(c.seq_len, " exceeds the model's max_seq_len ", m.max_seq_len));
  if (c.batch_tokens < 0) return bad("batch_tokens", absl::StrCat("must be >= 0, got ", c.batch_tokens));
  // Products of config values are checked: a huge micro_batch or grad_accum must be an error,
  // not a signed overflow (undefined behaviour; found by fuzz_config).
  auto product = [](std::initializer_list<int64_t> xs, int64_t* out) {
    int64_t p = 1;
    for (int64_t x : xs)
      if (__builtin_mul_overflow(p, x, &p)) return false;
    *out = p;
    return true;
  };
  int64_t per_micro = 0;
  if (!product({c.micro_batch, c.seq_len, static_cast<int64_t>(world_size)}, &per_micro))
    return bad("micro_batch", absl::StrCat(c.micro_batch, " x seq_len ", c.seq_len, " x world ", world_size,
                                           " tokens overflow a 64-bit count"));
  if (c.batch_tokens > 0) {
    if (c.batch_tokens % per_micro != 0)
      return bad("batch_tokens", absl::StrCat(c.batch_tokens, " is not a multiple of micro_batch*seq_len*world (",
                                              per_micro, "); pick a multiple or change micro_batch"));
    c.grad_accum = c.batch_tokens / per_micro;
  }
  if (c.grad_accum <= 0) return bad("grad_accum", absl::StrCat("must be positive, got ", c.grad_accum));
  int64_t per_step = 0;
  if (!product({per_micro, c.grad_accum}, &per_step))
    return bad("grad_accum", absl::StrCat(c.grad_accum, " micro-batches of ", per_micro,
                                          " tokens overflow a 64-bit count"));
  if (c.tokens < 0) return bad("tokens", "must be >= 0");
  if (c.tokens > 0) c.steps = c.tokens / per_step + (c.tokens % per_step != 0);  // ceil, without overflow
  if (c.steps <= 0) return bad("steps", absl::StrCat("must be positive, got ", c.steps));
  if (!(c.lr > 0)) return bad("lr", "must be positive");
  if (c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1) return bad("beta1/beta2", "must be in [0, 1)");
  if (c.weight_decay < 0) return bad("weight_decay", "must be >= 0");
  if (c.schedule != "cosine" && c.schedule != "wsd" && c.schedule != "constant")
    return bad("schedule", "expected cosine, wsd or constant, got '" + c.schedule + "'");
  if (c.warmup_steps < 0) return bad("warmup_steps", "must be >= 0");
  if (c.min_lr_ratio < 0 || c.min_lr_ratio > 1) return bad("min_lr_ratio", "must be in [0, 1]");
  if (c.decay_fraction < 0 || c.decay_fraction > 1) return bad("decay_fraction", "must be in [0, 1]");
  if (c.grad_clip < 0) return bad("grad_clip", "must be >= 0");
  if (c.log_interval <= 0) return bad("log_interval", "must be positive");
  if (c.checkpoint_interval < 0) return bad("checkpoint_interval", "must be >= 0");
  if (c.sample_tokens < 0) return bad("sample_tokens", "must be >= 0 (0 = no text samples at validation)");
  if (!(c.checkpoint_minutes >= 0))
    return bad("checkpoint_minutes", absl::StrFormat("must be >= 0 (0 = off), got %g", c.checkpoint_minutes));
  if (c.keep_last < 1) return bad("keep_last", "must be >= 1");
  if (c.nan_skip_limit < 0) return bad("nan_skip_limit", absl::StrCat("must be >= 0, got ", c.nan_skip_limit));
  if (c.inject_nan_steps < 1) return bad("inject_nan_steps", "must be >= 1");
  if (c.inject_nan_in != "grad" && c.inject_nan_in != "loss")
    return bad("inject_nan_in", "expected grad or loss, got '" + c.inject_nan_in + "'");
  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda") return bad("device", "expected auto, cpu or cuda, got '" + c.device + "'");
  if (!(c.ddp_bucket_mb > 0)) return bad("ddp_bucket_mb", "must be positive (MiB per all-reduce bucket)");
  if (c.dtype != "auto" && c.dtype != "fp32" && c.dtype != "bf16") return bad("dtype", "expected auto, fp32 or bf16, got '" + c.dtype + "'");
  return absl::OkStatus();
}

double lr_at(const TrainConfig& c, int64_t step) {
  const double min_lr = c.lr * c.min_lr_ratio;
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.schedule == "constant") return c.lr;
  const int64_t total = c.steps;
  if (c.schedule == "wsd") {
    const int64_t decay_steps = static_cast<int64_t>(std::llround(c.decay_fraction * total));
    const int64_t decay_start = total - decay_steps;
    if (step < decay_start || decay_steps == 0) return c.lr;
    const double frac = static_cast<double>(step - decay_start + 1) / static_cast<double>(decay_steps);
    return c.lr + (min_lr - c.lr) * std::min(1.0, frac);
  }
  // cosine from the end of warmup to the last step
  const int64_t span = std::max<int64_t>(1, total - c.warmup_steps - 1);
  const double frac = std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(span));
  return min_lr + 0.5 * (c.lr - min_lr) * (1.0 + std::cos(M_PI * frac));
}

}  // namespace lm::train
