// TrainConfig: every knob of `lmtrain fit`, strict JSON, written resolved into the run folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "model/config.h"

namespace lm::train {

// Sections: one small struct per component, defaults beside the fields. A field sits in the
// section of the code that reads it; the run-level fields that say how long the run is and which
// run it is stay at the top (docs/architecture.md, "Configuration").
struct BatchConfig {
  // Global batch in tokens = micro_batch * seq_len * grad_accum * world_size.
  // batch_tokens > 0 derives grad_accum from it (must divide evenly).
  int64_t micro_batch = 8;
  int64_t seq_len = 128;
  int64_t grad_accum = 1;
  int64_t batch_tokens = 0;
  template <class V>
  void visit(V& v) {
    v("micro_batch", micro_batch); v("seq_len", seq_len); v("grad_accum", grad_accum);
    v("batch_tokens", batch_tokens);
  }
};

// AdamW (Loshchilov & Hutter 2019), PyTorch's formula.
struct OptimizerConfig {
  double lr = 3e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;      // on matrices only (attention, MLP, untied head)
  bool decay_embeddings = false;  // also decay the token embedding
  double grad_clip = 1.0;         // max global L2 norm; 0 disables
  template <class V>
  void visit(V& v) {
    v("lr", lr); v("beta1", beta1); v("beta2", beta2); v("eps", eps); v("weight_decay", weight_decay);
    v("decay_embeddings", decay_embeddings); v("grad_clip", grad_clip);
  }
};

// "cosine" (warmup, cosine to min_lr_ratio·lr), "wsd" (warmup, stable, linear decay over the last
// decay_fraction of steps; Hu et al. 2024, MiniCPM) or "constant".
struct ScheduleConfig {
  std::string kind = "cosine";
  int64_t warmup_steps = 20;
  double min_lr_ratio = 0.1;
  double decay_fraction = 0.2;
  template <class V>
  void visit(V& v) {
    v("kind", kind); v("warmup_steps", warmup_steps); v("min_lr_ratio", min_lr_ratio);
    v("decay_fraction", decay_fraction);
  }
};

struct CheckpointConfig {
  int64_t interval = 100;  // steps; 0 = off
  // Also checkpoint when this many wall-clock minutes passed since the last one (0 = off); rank
  // 0's clock decides for all ranks. GPU presets use minutes: a step count is seconds on a GPU.
  double minutes = 0;
  int64_t keep_last = 3;
  // A checkpoint after the last step (false: none, e.g. train_step_bench: a 400m checkpoint is
  // 4.7 GB written with fsync; a stop by signal or stop_at_step still writes one).
  bool at_end = true;
  template <class V>
  void visit(V& v) {
    v("interval", interval); v("minutes", minutes); v("keep_last", keep_last); v("at_end", at_end);
  }
};

struct EvalConfig {
  int64_t interval = 100;  // 0 disables periodic validation
  int64_t windows = 16;    // validation windows per language
  // Text samples at each validation (train/samples.h): greedy continuations of this many tokens
  // (0 = none) of `sample_prompts`, else of each validation language's first words; written to
  // samples.jsonl and TensorBoard's Text tab.
  int64_t sample_tokens = 32;
  std::vector<std::string> sample_prompts;
  template <class V>
  void visit(V& v) {
    v("interval", interval); v("windows", windows); v("sample_tokens", sample_tokens);
    v("sample_prompts", sample_prompts);
  }
};

struct LoggingConfig {
  int64_t interval = 10;           // steps between log lines and metrics.jsonl rows
  double sentinel_fraction = 0.5;  // warn when tokens/s falls below this share of the run's median
  double peak_flops = 0;           // override of the device peak used for MFU (FLOP/s)
  // The throughput floor: warn loudly, with the step's forward/backward/optimizer split, when the
  // median MFU of the first intervals (warm-up excluded) is below this fraction of what the device
  // allows (`mfu`: the data-sheet peak on a GPU, the measured matmul ceiling on a CPU). 0 = off.
  double mfu_floor = 0.1;
  template <class V>
  void visit(V& v) {
    v("interval", interval); v("sentinel_fraction", sentinel_fraction); v("peak_flops", peak_flops);
    v("mfu_floor", mfu_floor);
  }
};

struct HardwareConfig {
  std::string device = "auto";  // auto (cuda when a GPU is visible, else cpu) | cpu | cuda
  std::string dtype = "auto";   // auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16 (autocast, fp32 master weights)
  bool tf32 = true;             // cuda: fp32 matmuls and convolutions on TF32 tensor cores
  int threads = 0;              // 0 = 1 or all cores, whichever a start-up probe finds faster (runtime/threads.h)
  // The attention kernel SDPA may pick on CUDA: auto (ATen's choice) | flash | cudnn | efficient |
  // math. The start-up verification checks the chosen one against the reference (model/verify.h).
  std::string sdpa_backend = "auto";
  // lmforge's own CUDA kernels (SwiGLU, rotary q/k, residual add + RMSNorm; model/fused_ops.h),
  // each checked against its reference at start-up. Off until measured on a GPU
  // (docs/performance.md, "Our own CUDA kernels").
  bool cuda_kernels = false;
  // Fast paths kept on their reference twin, by registry name (model/verify.h: attention.sdpa,
  // rms_norm.aten, loss.chunked, swiglu.cuda, rope.cuda, add_rms_norm.cuda): one kernel can be
  // left off, e.g. when scripts/gpu-check.sh's `kernels` stage finds it slower on a chip.
  std::vector<std::string> fast_paths_off;
  // CUDA graphs: the step's device work captured at the third step of a start and replayed
  // (train/step_graph.h). One GPU only (off with data parallel and fault injection, said so).
  // Off until measured to help (docs/performance.md, "CUDA graphs").
  bool cuda_graphs = false;
  // Activation recompute per block (model/recompute.h): a block keeps only its inputs for backward
  // and runs its forward again there. Bit-identical gradients, so a resume may switch it.
  bool recompute = false;
  template <class V>
  void visit(V& v) {
    v("device", device); v("dtype", dtype); v("tf32", tf32); v("threads", threads); v("sdpa_backend", sdpa_backend);
    v("cuda_kernels", cuda_kernels); v("fast_paths_off", fast_paths_off); v("cuda_graphs", cuda_graphs);
    v("recompute", recompute);
  }
};

// Data parallel: all-reduce gradient buckets from autograd hooks while backward still runs
// (false: after the whole backward, the older path kept as a fallback); bucket cap in MiB.
// zero 1: ZeRO-1, each rank keeps AdamW's moments for 1/world of the parameters (buckets are
// reduce-scattered, each rank updates its shard, an all-gather restores the weights;
// train/optimizer_shards.h). 0 (default): every rank keeps the whole state.
// master_weights "sharded" (with zero 1 and bf16): the distributed optimizer. The matmul weights
// train as bf16 working copies; their fp32 master weights are sharded with the moments, and each
// micro-batch's gradient is added into the fp32 buckets and dropped (no .grad kept). "whole"
// (default): fp32 weights on every rank, cast by autocast.
struct DistributedConfig {
  bool overlap = true;
  double bucket_mb = 25;
  int64_t zero = 0;
  std::string master_weights = "whole";
  // What the gradient collectives carry: fp32 (default), or bf16 (half the bytes on the wire; each
  // rank's bucket rounded to bf16, summed in bf16, widened back before the average).
  std::string reduce_dtype = "fp32";
  template <class V>
  void visit(V& v) {
    v("overlap", overlap); v("bucket_mb", bucket_mb); v("zero", zero); v("master_weights", master_weights);
    v("reduce_dtype", reduce_dtype);
  }
};

// Per-group learning rates and the embeddings-only first stage of continued pretraining on an
// extended vocabulary (train/param_groups.h): each group's lr is optimizer.lr (as scheduled)
// times its scale; for the first embeddings_only_steps optimizer steps only the embedding and the
// head train (every other parameter keeps its bytes), then the whole model. A scale of 0 freezes a
// group for the whole run.
struct ParamGroupsConfig {
  double embeddings_lr_scale = 1.0;  // model.embed_tokens (and a tied head)
  double head_lr_scale = 1.0;        // lm_head (untied)
  double blocks_lr_scale = 1.0;      // attention and MLP weights and biases of every layer
  double norms_lr_scale = 1.0;       // RMSNorm weights
  int64_t embeddings_only_steps = 0;
  // After the first stage the groups that join it (blocks, norms) ramp linearly from 1/W of their lr
  // to all of it over these W steps (0: all of it at once), as a warmup does for a fresh run.
  int64_t rewarmup_steps = 0;
  template <class V>
  void visit(V& v) {
    v("embeddings_lr_scale", embeddings_lr_scale); v("head_lr_scale", head_lr_scale);
    v("blocks_lr_scale", blocks_lr_scale); v("norms_lr_scale", norms_lr_scale);
    v("embeddings_only_steps", embeddings_only_steps); v("rewarmup_steps", rewarmup_steps);
  }
};

struct DebugConfig {
  bool verify_at_start = true;         // gradient-flow arbiter before step 1
  int64_t inject_nan_step = -1;        // fault injection for tests: poison one gradient at this step
  int64_t inject_nan_steps = 1;        // ... and at the steps after it, this many in all
  std::string inject_nan_in = "grad";  // "grad": one down_proj gradient element; "loss": the loss
  double slow_forward_ms = 0;          // for tests: sleep this long in each micro-batch's forward
  template <class V>
  void visit(V& v) {
    v("verify_at_start", verify_at_start); v("inject_nan_step", inject_nan_step);
    v("inject_nan_steps", inject_nan_steps); v("inject_nan_in", inject_nan_in);
    v("slow_forward_ms", slow_forward_ms);
  }
};

struct TrainConfig {
  // Budget: `tokens` wins when > 0, else `steps`.
  int64_t tokens = 0;
  int64_t steps = 200;
  uint64_t seed = 1234;
  int64_t stop_at_step = -1;  // stop cleanly (checkpoint) at this step; the schedule stays `steps`
  // Non-finite loss or gradient: 0 stops at the first one (nothing applied, last checkpoint kept);
  // N > 0 skips the update of up to N such steps in the whole run (counted in the checkpoint, each
  // logged with step and parameter, `skipped` in metrics.jsonl) and stops at the (N+1)-th.
  int64_t nan_skip_limit = 0;
  BatchConfig batch;
  OptimizerConfig optimizer;
  ParamGroupsConfig param_groups;
  ScheduleConfig schedule;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  LoggingConfig logging;
  HardwareConfig hardware;
  DistributedConfig distributed;
  DebugConfig debug;

  template <class V>
  void visit(V& v) {
    v("tokens", tokens); v("steps", steps); v("seed", seed); v("stop_at_step", stop_at_step);
    v("nan_skip_limit", nan_skip_limit);
    v("batch", batch); v("optimizer", optimizer); v("param_groups", param_groups);
    v("schedule", schedule); v("checkpoint", checkpoint);
    v("eval", eval); v("logging", logging); v("hardware", hardware); v("distributed", distributed);
    v("debug", debug);
  }

  // A flat "train" object (config.json before the sections) is refused with where each key moved.
  static absl::Status check_json(const Json& j, const std::string& path);
};

// The preset's training defaults (model::preset_training) over the struct's: what `lmtrain fit
// --preset NAME` trains with before config.json and flags.
TrainConfig preset_train_config(const std::string& preset);

// Where each key of the flat (pre-section) "train" object lives now: "lr" -> "optimizer.lr".
const std::vector<std::pair<std::string, std::string>>& flat_key_moves();

// One override of a training field from the command line: `--set optimizer.lr=3e-4`, or a short
// flag (`--lr 3e-4`) that is an alias of a dotted key (kFlagAliases).
struct Override {
  std::string key;    // dotted, inside "train": "optimizer.lr", "steps"
  std::string value;  // the text given, read as the field's type by set_dotted (core/config.h)
  std::string flag;   // what the user wrote, for messages: "--lr" or "--set"
};

struct FlagAlias {
  const char* flag;  // "--lr"
  const char* key;   // "optimizer.lr"
  const char* help;
};
// The short flags of `lmtrain fit`, each one dotted key: app/fit_flags.h binds them, `lmtrain plan`
// prints them, resume names them.
const std::vector<FlagAlias>& flag_aliases();

// `lmtrain fit`'s training overrides, in command-line order; unset fields keep the preset's, the
// config file's or the run's value. app/fit_flags.h fills it; tests and `lmtrain plan` too.
struct TrainOverrides {
  std::vector<Override> items;
  // Adds `--set KEY=VALUE`'s text; an argument without '=' is an error naming the form.
  absl::Status add_set(const std::string& key_eq_value);
  // Sets each field (type-checked; an unknown key suggests the nearest), then the budget rules:
  // `steps` without `tokens` clears the token budget, `batch.grad_accum` without
  // `batch.batch_tokens` clears the batch_tokens that would re-derive it (clear_shadowed). A key
  // given twice (`--lr` and `--set optimizer.lr`) is an error.
  absl::Status apply(TrainConfig& cfg) const;
  // What set `field` (dotted with "train." in front) this time: "--lr", "--set optimizer.lr", "".
  std::string source_of(const std::string& field) const;
};

// A budget or batch field set without its partner means it: `steps` without `tokens` clears the
// token budget (the preset's or the run's) that would win; `batch.grad_accum` without
// `batch.batch_tokens` clears batch_tokens. `keys` are the dotted keys set (a config file's "train"
// section's leaves, or the overrides' keys).
void clear_shadowed(const std::vector<std::string>& keys, TrainConfig& cfg);
void clear_shadowed(const Json& train_section, TrainConfig& cfg);

// device "auto" -> cuda when `cuda_available` else cpu; dtype "auto" -> bf16 on cuda, fp32 on cpu.
// Returns one line for fit's start-up log saying what was chosen and why.
std::string resolve_hardware(TrainConfig& cfg, bool cuda_available);

// Bounds resolve() enforces: micro-batches per optimizer step, tokens per step, window length.
inline constexpr int64_t kMaxGradAccum = 65536;
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 27;
// The shortest training window: with one token, softmax attention is constant and q/k learn nothing.
inline constexpr int64_t kMinSeqLen = 2;

// Fills derived fields (grad_accum from batch_tokens, steps from tokens) and checks ranges; device
// and dtype may still be "auto" (resolve_hardware decides them: fit and Trainer::create call it
// first; this file stays free of LibTorch for the fuzz build);
// errors name the field ("train.batch.micro_batch: must be positive, got -4").
absl::Status resolve(TrainConfig& cfg, const model::ModelConfig& model, int world_size = 1);

// Tokens consumed by one optimizer step across all ranks.
int64_t tokens_per_step(const TrainConfig& cfg, int world_size = 1);

// Learning rate at optimizer step `step` (0-based).
double lr_at(const TrainConfig& cfg, int64_t step);

}  // namespace lm::train
