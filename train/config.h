// TrainConfig: every knob of `lmtrain fit`, strict JSON, written resolved into the run folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "model/config.h"

namespace lm::train {

struct TrainConfig {
  // Budget: `tokens` wins when > 0, else `steps`.
  int64_t tokens = 0;
  int64_t steps = 200;
  // Batch: global batch in tokens = micro_batch * seq_len * grad_accum * world_size.
  // batch_tokens > 0 derives grad_accum from it (must divide evenly).
  int64_t batch_tokens = 0;
  int64_t micro_batch = 8;
  int64_t seq_len = 128;
  int64_t grad_accum = 1;
  // AdamW (Loshchilov & Hutter 2019), PyTorch's formula.
  double lr = 3e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;     // on matrices only (attention, MLP, untied head)
  bool decay_embeddings = false;  // also decay the token embedding
  // Schedule: "cosine" (warmup, cosine to min_lr_ratio·lr), "wsd" (warmup, stable, linear
  // decay over the last decay_fraction of steps; Hu et al. 2024, MiniCPM) or "constant".
  std::string schedule = "cosine";
  int64_t warmup_steps = 20;
  double min_lr_ratio = 0.1;
  double decay_fraction = 0.2;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables
  uint64_t seed = 1234;
  int64_t log_interval = 10;
  int64_t eval_interval = 100;  // 0 disables periodic validation
  int64_t eval_windows = 16;    // validation windows per language
  // Text samples at each validation (train/samples.h): greedy continuations of this many tokens
  // (0 = none) of `sample_prompts`, else of each validation language's first words; written to
  // samples.jsonl and TensorBoard's Text tab.
  int64_t sample_tokens = 32;
  std::vector<std::string> sample_prompts;
  int64_t checkpoint_interval = 100;  // steps; 0 = off
  // Also checkpoint when this many wall-clock minutes passed since the last one (0 = off); rank
  // 0's clock decides for all ranks. GPU presets use minutes: a step count is seconds on a GPU.
  double checkpoint_minutes = 0;
  int64_t keep_last = 3;
  int threads = 0;              // 0 = all cores
  std::string device = "auto";  // auto (cuda when a GPU is visible, else cpu) | cpu | cuda
  std::string dtype = "auto";   // auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16 (autocast, fp32 master weights)
  bool tf32 = true;             // cuda: fp32 matmuls and convolutions on TF32 tensor cores
  double sentinel_fraction = 0.5;  // warn when tokens/s falls below this share of the run's median
  bool verify_at_start = true;     // gradient-flow arbiter before step 1
  double peak_flops = 0;           // override of the device peak used for MFU (FLOP/s)
  int64_t stop_at_step = -1;       // stop cleanly (checkpoint) at this step; the schedule stays `steps`
  // Non-finite loss or gradient: 0 stops at the first one (nothing applied, last checkpoint kept);
  // N > 0 skips the update of up to N such steps in the whole run (counted in the checkpoint, each
  // logged with step and parameter, `skipped` in metrics.jsonl) and stops at the (N+1)-th.
  int64_t nan_skip_limit = 0;
  int64_t inject_nan_step = -1;    // fault injection for tests: poison one gradient at this step
  int64_t inject_nan_steps = 1;    // ... and at the steps after it, this many in all
  std::string inject_nan_in = "grad";  // "grad": one down_proj gradient element; "loss": the loss
  // Data parallel: all-reduce gradient buckets from autograd hooks while backward still runs
  // (false: after the whole backward, the older path kept as a fallback); bucket cap in MiB.
  bool ddp_overlap = true;
  double ddp_bucket_mb = 25;
  // The attention kernel SDPA may pick on CUDA: auto (ATen's choice) | flash | cudnn | efficient |
  // math. The start-up verification checks the chosen one against the reference (model/verify.h).
  std::string sdpa_backend = "auto";

  template <class V>
  void visit(V& v) {
    v("tokens", tokens); v("steps", steps); v("batch_tokens", batch_tokens);
    v("micro_batch", micro_batch); v("seq_len", seq_len); v("grad_accum", grad_accum);
    v("lr", lr); v("beta1", beta1); v("beta2", beta2); v("eps", eps);
    v("weight_decay", weight_decay); v("decay_embeddings", decay_embeddings);
    v("schedule", schedule); v("warmup_steps", warmup_steps); v("min_lr_ratio", min_lr_ratio);
    v("decay_fraction", decay_fraction); v("grad_clip", grad_clip); v("seed", seed);
    v("log_interval", log_interval); v("eval_interval", eval_interval);
    v("eval_windows", eval_windows); v("sample_tokens", sample_tokens); v("sample_prompts", sample_prompts);
    v("checkpoint_interval", checkpoint_interval);
    v("keep_last", keep_last); v("threads", threads); v("device", device); v("dtype", dtype); v("tf32", tf32);
    v("checkpoint_minutes", checkpoint_minutes);
    v("sentinel_fraction", sentinel_fraction); v("verify_at_start", verify_at_start);
    v("peak_flops", peak_flops); v("stop_at_step", stop_at_step);
    v("inject_nan_step", inject_nan_step); v("ddp_overlap", ddp_overlap); v("ddp_bucket_mb", ddp_bucket_mb);
    v("nan_skip_limit", nan_skip_limit); v("inject_nan_steps", inject_nan_steps); v("inject_nan_in", inject_nan_in);
    v("sdpa_backend", sdpa_backend);
  }
};

// The preset's training defaults (model::preset_training) over the struct's: what `lmtrain fit
// --preset NAME` trains with before config.json and flags.
TrainConfig preset_train_config(const std::string& preset);

// `lmtrain fit`'s flags that override a TrainConfig (unset = keep). app/fit_flags.h binds them to
// the command line; `lmtrain plan` prints them; both go through apply() so they cannot disagree.
struct TrainOverrides {
  std::optional<double> tokens, lr, checkpoint_minutes;
  std::optional<int64_t> steps, micro_batch, seq_len, grad_accum, batch_tokens, stop_at_step, checkpoint_interval;
  std::optional<std::string> dtype, device;
  std::optional<bool> tf32;
  // --steps clears the token budget; --grad-accum clears a batch_tokens that would re-derive it.
  void apply(TrainConfig& cfg) const;
};

// A config file's "train" section that sets `steps` without `tokens` (or `grad_accum` without
// `batch_tokens`) means it: clear the preset's token budget (batch_tokens) that would win.
void clear_shadowed(const Json& train_section, TrainConfig& cfg);

// device "auto" -> cuda when `cuda_available` else cpu; dtype "auto" -> bf16 on cuda, fp32 on cpu.
// Returns one line for fit's start-up log saying what was chosen and why.
std::string resolve_hardware(TrainConfig& cfg, bool cuda_available);

// Fills derived fields (grad_accum from batch_tokens, steps from tokens) and checks ranges; device
// and dtype may still be "auto" (resolve_hardware decides them: fit and Trainer::create call it
// first; this file stays free of LibTorch for the fuzz build);
// errors name the field ("train.micro_batch: must be positive, got -4").
absl::Status resolve(TrainConfig& cfg, const model::ModelConfig& model, int world_size = 1);

// Tokens consumed by one optimizer step across all ranks.
int64_t tokens_per_step(const TrainConfig& cfg, int world_size = 1);

// Learning rate at optimizer step `step` (0-based).
double lr_at(const TrainConfig& cfg, int64_t step);

}  // namespace lm::train
