#include "train/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace lm::train {

int64_t tokens_per_step(const TrainConfig& c, int world_size) {
  return c.batch.micro_batch * c.batch.seq_len * c.batch.grad_accum * world_size;
}

TrainConfig preset_train_config(const std::string& preset) {
  const model::PresetTraining p = model::preset_training(preset);
  TrainConfig c;
  c.tokens = static_cast<int64_t>(p.tokens);
  c.steps = p.steps;
  c.batch.micro_batch = p.micro_batch;
  c.batch.seq_len = p.seq_len;
  c.batch.batch_tokens = p.batch_tokens;
  c.optimizer.lr = p.lr;
  c.optimizer.weight_decay = p.weight_decay;
  c.schedule.warmup_steps = p.warmup_steps;
  c.schedule.min_lr_ratio = p.min_lr_ratio;
  c.eval.interval = p.eval_interval;
  c.checkpoint.interval = p.checkpoint_interval;
  c.checkpoint.minutes = p.checkpoint_minutes;
  return c;
}

const std::vector<std::pair<std::string, std::string>>& flat_key_moves() {
  static const std::vector<std::pair<std::string, std::string>> kMoves = {
      {"micro_batch", "batch.micro_batch"}, {"seq_len", "batch.seq_len"}, {"grad_accum", "batch.grad_accum"},
      {"batch_tokens", "batch.batch_tokens"}, {"lr", "optimizer.lr"}, {"beta1", "optimizer.beta1"},
      {"beta2", "optimizer.beta2"}, {"eps", "optimizer.eps"}, {"weight_decay", "optimizer.weight_decay"},
      {"decay_embeddings", "optimizer.decay_embeddings"}, {"grad_clip", "optimizer.grad_clip"},
      {"schedule", "schedule.kind"}, {"warmup_steps", "schedule.warmup_steps"},
      {"min_lr_ratio", "schedule.min_lr_ratio"}, {"decay_fraction", "schedule.decay_fraction"},
      {"checkpoint_interval", "checkpoint.interval"}, {"checkpoint_minutes", "checkpoint.minutes"},
      {"keep_last", "checkpoint.keep_last"}, {"eval_interval", "eval.interval"}, {"eval_windows", "eval.windows"},
      {"log_interval", "logging.interval"}, {"sentinel_fraction", "logging.sentinel_fraction"},
      {"peak_flops", "logging.peak_flops"}, {"device", "hardware.device"}, {"dtype", "hardware.dtype"},
      {"tf32", "hardware.tf32"}, {"threads", "hardware.threads"}, {"sdpa_backend", "hardware.sdpa_backend"},
      {"ddp_overlap", "distributed.overlap"}, {"ddp_bucket_mb", "distributed.bucket_mb"},
      {"verify_at_start", "debug.verify_at_start"}, {"inject_nan_step", "debug.inject_nan_step"},
      {"inject_nan_steps", "debug.inject_nan_steps"}, {"inject_nan_in", "debug.inject_nan_in"}};
  return kMoves;
}

absl::Status TrainConfig::check_json(const Json& j, const std::string& path) {
  // "schedule" was a string before it was a section: only a string there is the old layout.
  Json moved = Json::object();
  std::vector<std::string> lines;
  std::set<std::string> old_keys;
  for (const auto& [old_key, now] : flat_key_moves()) {
    if (!j.contains(old_key) || (old_key == "schedule" && !j[old_key].is_string())) continue;
    old_keys.insert(old_key);
    lines.push_back(absl::StrCat(old_key, " -> ", path.empty() ? "" : path + ".", now));
    moved[Json::json_pointer("/" + absl::StrReplaceAll(now, {{".", "/"}}))] = j[old_key];
  }
  if (lines.empty()) return absl::OkStatus();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!old_keys.count(it.key()) && !moved.contains(it.key())) moved[it.key()] = *it;
  return absl::InvalidArgumentError(absl::StrCat(
      path.empty() ? "train" : path, ": a flat training config (lmforge before the config sections); each key moved "
      "into a section: ", absl::StrJoin(lines, ", "), ". Rewrite it (for a run folder: its config.json) with this \"",
      path.empty() ? "train" : path, "\" object, then run again: ", moved.dump()));
}

const std::vector<FlagAlias>& flag_aliases() {
  static const std::vector<FlagAlias> kAliases = {
      {"--tokens", "tokens", "token budget (e.g. 2e9); wins over steps (default: the preset's)"},
      {"--steps", "steps", "optimizer steps (clears the preset's token budget unless --tokens is given too)"},
      {"--lr", "optimizer.lr", "peak learning rate"},
      {"--micro-batch", "batch.micro_batch", "sequences per micro-batch per rank"},
      {"--seq-len", "batch.seq_len", "sequence length"},
      {"--grad-accum", "batch.grad_accum", "micro-batches per optimizer step (clears batch_tokens)"},
      {"--batch-tokens", "batch.batch_tokens", "global batch in tokens (derives --grad-accum)"},
      {"--stop-at-step", "stop_at_step", "checkpoint and stop at this step (schedule unchanged)"},
      {"--checkpoint-interval", "checkpoint.interval", "checkpoint every N steps (0 = off)"},
      {"--checkpoint-minutes", "checkpoint.minutes", "checkpoint every M wall-clock minutes (0 = off)"},
      {"--dtype", "hardware.dtype", "auto (bf16 on cuda, fp32 on cpu), fp32 or bf16"},
      {"--device", "hardware.device", "auto (cuda when a GPU is visible), cpu or cuda"},
      {"--tf32", "hardware.tf32", "on|off: TF32 tensor cores for fp32 matmuls on cuda (default on)"},
      {"--recompute", "hardware.recompute",
       "on|off: recompute each block's activations in backward (less memory, one more forward; default off)"},
      {"--ddp-bucket-mb", "distributed.bucket_mb", "gradient all-reduce bucket cap in MiB (default 25)"},
      {"--zero", "distributed.zero",
       "0|1: 1 shards AdamW's moments over the data-parallel ranks (ZeRO-1: each keeps 1/world and writes "
       "its own checkpoint file, which a resume on any number of ranks reads; "
       "e.g. torchrun --nproc-per-node 8 lmtrain fit ... --zero 1); default 0"},
      {"--master-weights", "distributed.master_weights",
       "whole|sharded: sharded (with --zero 1, bf16) trains bf16 matmul weights with their fp32 master "
       "weights sharded over the ranks (the distributed optimizer; e.g. ... --zero 1 --master-weights sharded)"},
      {"--reduce-dtype", "distributed.reduce_dtype",
       "fp32|bf16: what the gradient all-reduce / reduce-scatter carries; bf16 halves the bytes on the wire "
       "(rounds each rank's gradient; default fp32)"}};
  return kAliases;
}

absl::Status TrainOverrides::add_set(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    return absl::InvalidArgumentError(absl::StrCat("--set ", arg, ": expected KEY=VALUE with a dotted key of the "
                                                   "\"train\" config, e.g. --set optimizer.lr=3e-4"));
  items.push_back({arg.substr(0, eq), arg.substr(eq + 1), "--set"});
  return absl::OkStatus();
}

absl::Status TrainOverrides::apply(TrainConfig& c) const {
  std::map<std::string, std::string> by_key;
  std::vector<std::string> keys;
  for (const auto& o : items) {
    const std::string what = o.flag == "--set" ? "--set " + o.key : o.flag;
    auto [it, fresh] = by_key.emplace(o.key, what);
    if (!fresh)
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": train.", o.key, " is already set by ", it->second, "; give it once"));
    LM_RETURN_IF_ERROR(annotate(set_dotted(c, o.key, o.value, "train"), what));
    keys.push_back(o.key);
  }
  clear_shadowed(keys, c);
  return absl::OkStatus();
}

std::string TrainOverrides::source_of(const std::string& field) const {
  for (const auto& o : items)
    if ("train." + o.key == field) return o.flag == "--set" ? "--set " + o.key : o.flag;
  return "";
}

void clear_shadowed(const std::vector<std::string>& keys, TrainConfig& c) {
  auto has = [&](const char* k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
  if (has("steps") && !has("tokens")) c.tokens = 0;
  if (has("batch.grad_accum") && !has("batch.batch_tokens")) c.batch.batch_tokens = 0;
}

void clear_shadowed(const Json& t, TrainConfig& c) {
  if (t.is_object()) clear_shadowed(dotted_keys(t), c);
}

std::string resolve_hardware(TrainConfig& c, bool cuda_available) {
  std::string dev_why = "asked", dtype_why = "asked";
  if (c.hardware.device == "auto") {
    c.hardware.device = cuda_available ? "cuda" : "cpu";
    dev_why = cuda_available ? "auto: a CUDA device is visible" : "auto: no CUDA device visible";
  }
  if (c.hardware.dtype == "auto") {
    c.hardware.dtype = c.hardware.device == "cuda" ? "bf16" : "fp32";
    dtype_why = c.hardware.device == "cuda" ? "auto: bf16 autocast on cuda" : "auto: fp32 on cpu, --dtype bf16 to change";
  }
  const std::string tf32 = c.hardware.device != "cuda" ? "n/a on cpu"
                           : c.hardware.tf32           ? "on for fp32 matmuls (train.hardware.tf32; --tf32 off for exact fp32)"
                                              : "off (train.hardware.tf32 false)";
  return absl::StrFormat("device %s (%s), dtype %s (%s), TF32 %s", c.hardware.device, dev_why, c.hardware.dtype, dtype_why, tf32);
}

namespace {

// The value ranges of the fields resolve() does not derive.
absl::Status check_param_groups(const ParamGroupsConfig& g) {
  const std::pair<const char*, double> scales[] = {{"embeddings_lr_scale", g.embeddings_lr_scale},
                                                   {"head_lr_scale", g.head_lr_scale},
                                                   {"blocks_lr_scale", g.blocks_lr_scale},
                                                   {"norms_lr_scale", g.norms_lr_scale}};
  for (const auto& [key, v] : scales)
    if (!(v >= 0 && v <= 1e6))
      return absl::InvalidArgumentError(absl::StrFormat(
          "train.param_groups.%s: must be a multiplier of optimizer.lr in [0, 1e6] (0 freezes the group), got %g", key, v));
  if (g.embeddings_only_steps < 0)
    return absl::InvalidArgumentError(absl::StrCat("train.param_groups.embeddings_only_steps: must be >= 0, got ",
                                                   g.embeddings_only_steps));
  if (g.rewarmup_steps < 0)
    return absl::InvalidArgumentError(absl::StrCat("train.param_groups.rewarmup_steps: must be >= 0, got ",
                                                   g.rewarmup_steps));
  if (g.rewarmup_steps > 0 && g.embeddings_only_steps == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "train.param_groups.rewarmup_steps: ", g.rewarmup_steps, " ramps the blocks in after the embeddings-only "
        "stage, but embeddings_only_steps is 0 (no stage); set embeddings_only_steps too, or use "
        "schedule.warmup_steps for the whole run"));
  if (g.embeddings_only_steps > 0 && g.embeddings_lr_scale == 0 && g.head_lr_scale == 0)
    return absl::InvalidArgumentError(
        "train.param_groups.embeddings_only_steps: the embeddings and the head are both frozen (lr scale 0), so the "
        "first stage would train nothing; give embeddings_lr_scale or head_lr_scale a positive value");
  return absl::OkStatus();
}

absl::Status check_ranges(const TrainConfig& c) {
  auto bad = [](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError("train." + field + ": " + why);
  };
  if (!(c.optimizer.lr > 0)) return bad("optimizer.lr", "must be positive");
  if (c.optimizer.beta1 < 0 || c.optimizer.beta1 >= 1 || c.optimizer.beta2 < 0 || c.optimizer.beta2 >= 1) return bad("optimizer.beta1/beta2", "must be in [0, 1)");
  if (c.optimizer.weight_decay < 0) return bad("optimizer.weight_decay", "must be >= 0");
  // AdamW divides by sqrt(v) + eps: eps <= 0 divides by zero where a gradient is zero (issue 40).
  if (!(c.optimizer.eps > 0))
    return bad("optimizer.eps", absl::StrFormat("must be positive (AdamW divides by sqrt(v) + eps; usual 1e-8), got %g",
                                                c.optimizer.eps));
  if (c.schedule.kind != "cosine" && c.schedule.kind != "wsd" && c.schedule.kind != "constant")
    return bad("schedule.kind", "expected cosine, wsd or constant, got '" + c.schedule.kind + "'");
  if (c.schedule.warmup_steps < 0) return bad("schedule.warmup_steps", "must be >= 0");
  if (c.schedule.min_lr_ratio < 0 || c.schedule.min_lr_ratio > 1) return bad("schedule.min_lr_ratio", "must be in [0, 1]");
  if (c.schedule.decay_fraction < 0 || c.schedule.decay_fraction > 1) return bad("schedule.decay_fraction", "must be in [0, 1]");
  if (c.optimizer.grad_clip < 0) return bad("optimizer.grad_clip", "must be >= 0");
  if (c.logging.interval <= 0) return bad("logging.interval", "must be positive");
  if (c.checkpoint.interval < 0) return bad("checkpoint.interval", "must be >= 0");
  if (c.eval.sample_tokens < 0) return bad("eval.sample_tokens", "must be >= 0 (0 = no text samples at validation)");
  if (!(c.checkpoint.minutes >= 0))
    return bad("checkpoint.minutes", absl::StrFormat("must be >= 0 (0 = off), got %g", c.checkpoint.minutes));
  if (c.checkpoint.keep_last < 1) return bad("checkpoint.keep_last", "must be >= 1");
  if (c.nan_skip_limit < 0) return bad("nan_skip_limit", absl::StrCat("must be >= 0, got ", c.nan_skip_limit));
  if (!(c.logging.mfu_floor >= 0 && c.logging.mfu_floor < 1))
    return bad("logging.mfu_floor", absl::StrFormat("must be in [0, 1) (a fraction of the peak; 0 = off), got %g", c.logging.mfu_floor));
  if (!(c.debug.slow_forward_ms >= 0)) return bad("debug.slow_forward_ms", "must be >= 0");
  if (c.debug.inject_nan_steps < 1) return bad("debug.inject_nan_steps", "must be >= 1");
  if (c.debug.inject_nan_in != "grad" && c.debug.inject_nan_in != "loss")
    return bad("debug.inject_nan_in", "expected grad or loss, got '" + c.debug.inject_nan_in + "'");
  if (c.hardware.device != "auto" && c.hardware.device != "cpu" && c.hardware.device != "cuda") return bad("hardware.device", "expected auto, cpu or cuda, got '" + c.hardware.device + "'");
  if (!(c.distributed.bucket_mb > 0)) return bad("distributed.bucket_mb", "must be positive (MiB per all-reduce bucket)");
  if (c.distributed.zero != 0 && c.distributed.zero != 1)
    return bad("distributed.zero", absl::StrCat("expected 0 (whole optimizer state on every rank) or 1 (ZeRO-1), got ",
                                                c.distributed.zero));
  if (c.distributed.zero == 1 && !c.distributed.overlap)
    return bad("distributed.zero", "1 needs distributed.overlap true (ZeRO-1 reduce-scatters the overlapped buckets)");
  if (c.distributed.zero == 1 && c.debug.inject_nan_step >= 0 && c.debug.inject_nan_in == "grad")
    return bad("distributed.zero", "1 with debug.inject_nan_in grad: the poisoned gradient would be the local one, "
                                   "not the reduced shard; inject into the loss instead");
  if (c.distributed.master_weights != "whole" && c.distributed.master_weights != "sharded")
    return bad("distributed.master_weights", "expected whole or sharded, got '" + c.distributed.master_weights + "'");
  if (c.distributed.master_weights == "sharded" && c.distributed.zero != 1)
    return bad("distributed.master_weights", "sharded shards the master weights with AdamW's moments: it needs "
                                             "distributed.zero 1 (--zero 1)");
  if (c.distributed.reduce_dtype != "fp32" && c.distributed.reduce_dtype != "bf16")
    return bad("distributed.reduce_dtype", "expected fp32 or bf16, got '" + c.distributed.reduce_dtype + "'");
  if (c.distributed.reduce_dtype == "bf16" && !c.distributed.overlap)
    return bad("distributed.reduce_dtype", "bf16 reduces the overlapped buckets: it needs distributed.overlap true");
  if (c.distributed.master_weights == "sharded" && c.hardware.dtype == "fp32")
    return bad("distributed.master_weights", "sharded trains bf16 working weights: it needs hardware.dtype bf16 "
                                             "(or auto on a GPU), not fp32");
  if (c.hardware.dtype != "auto" && c.hardware.dtype != "fp32" && c.hardware.dtype != "bf16") return bad("hardware.dtype", "expected auto, fp32 or bf16, got '" + c.hardware.dtype + "'");
  return check_param_groups(c.param_groups);
}

}  // namespace

absl::Status resolve(TrainConfig& c, const model::ModelConfig& m, int world_size) {
  auto bad = [](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError("train." + field + ": " + why);
  };
  if (c.batch.micro_batch <= 0) return bad("batch.micro_batch", absl::StrCat("must be positive, got ", c.batch.micro_batch));
  if (c.batch.seq_len <= 0) return bad("batch.seq_len", absl::StrCat("must be positive, got ", c.batch.seq_len));
  if (c.batch.seq_len < kMinSeqLen)  // --seq-len 1 failed as "start-up verification failed ... zero gradient"
    return bad("batch.seq_len", absl::StrFormat("%d is too short: attention over a single token has nothing to learn "
                                                "(its query and key weights get no gradient); pass --seq-len %d or more",
                                                c.batch.seq_len, kMinSeqLen));
  if (c.batch.seq_len > m.max_seq_len)
    return bad("batch.seq_len", absl::StrCat(c.batch.seq_len, " exceeds the model's max_seq_len ", m.max_seq_len));
  if (c.batch.batch_tokens < 0) return bad("batch.batch_tokens", absl::StrCat("must be >= 0, got ", c.batch.batch_tokens));
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
  if (!product({c.batch.micro_batch, c.batch.seq_len, static_cast<int64_t>(world_size)}, &per_micro))
    return bad("batch.micro_batch", absl::StrCat(c.batch.micro_batch, " x seq_len ", c.batch.seq_len, " x world ", world_size,
                                           " tokens overflow a 64-bit count"));
  if (c.batch.batch_tokens > 0) {
    if (c.batch.batch_tokens % per_micro != 0)
      return bad("batch.batch_tokens", absl::StrCat(c.batch.batch_tokens, " is not a multiple of micro_batch*seq_len*world (",
                                              per_micro, "); pick a multiple or change micro_batch"));
    c.batch.grad_accum = c.batch.batch_tokens / per_micro;
  }
  if (c.batch.grad_accum <= 0) return bad("batch.grad_accum", absl::StrCat("must be positive, got ", c.batch.grad_accum));
  int64_t per_step = 0;
  if (!product({per_micro, c.batch.grad_accum}, &per_step))
    return bad("batch.grad_accum", absl::StrCat(c.batch.grad_accum, " micro-batches of ", per_micro,
                                          " tokens overflow a 64-bit count"));
  // Upper bounds (issue 40): `--grad-accum 1000000000` was accepted as a 1024B-token step that
  // ignored SIGTERM for minutes. The largest published pretraining batches are ~16M tokens.
  if (c.batch.grad_accum > kMaxGradAccum)
    return bad("batch.grad_accum", absl::StrFormat("%d micro-batches per step is above the limit of %d; a larger "
                                                   "batch.micro_batch gives the same tokens per step in fewer",
                                                   c.batch.grad_accum, kMaxGradAccum));
  if (per_step > kMaxTokensPerStep)
    return bad("batch.grad_accum", absl::StrFormat("%d tokens per step (micro_batch %d x seq_len %d x grad_accum %d x "
                                                   "%d ranks) is above the limit of %d (2^27); lower grad_accum or "
                                                   "batch_tokens",
                                                   per_step, c.batch.micro_batch, c.batch.seq_len, c.batch.grad_accum,
                                                   world_size, kMaxTokensPerStep));
  if (c.tokens < 0) return bad("tokens", "must be >= 0");
  if (c.tokens > 0) c.steps = c.tokens / per_step + (c.tokens % per_step != 0);  // ceil, without overflow
  if (c.steps <= 0) return bad("steps", absl::StrCat("must be positive, got ", c.steps));
  return check_ranges(c);
}

double lr_at(const TrainConfig& c, int64_t step) {
  const double min_lr = c.optimizer.lr * c.schedule.min_lr_ratio;
  if (c.schedule.warmup_steps > 0 && step < c.schedule.warmup_steps)
    return c.optimizer.lr * static_cast<double>(step + 1) / static_cast<double>(c.schedule.warmup_steps);
  if (c.schedule.kind == "constant") return c.optimizer.lr;
  const int64_t total = c.steps;
  if (c.schedule.kind == "wsd") {
    const int64_t decay_steps = static_cast<int64_t>(std::llround(c.schedule.decay_fraction * total));
    const int64_t decay_start = total - decay_steps;
    if (step < decay_start || decay_steps == 0) return c.optimizer.lr;
    const double frac = static_cast<double>(step - decay_start + 1) / static_cast<double>(decay_steps);
    return c.optimizer.lr + (min_lr - c.optimizer.lr) * std::min(1.0, frac);
  }
  // cosine from the end of warmup to the last step
  const int64_t span = std::max<int64_t>(1, total - c.schedule.warmup_steps - 1);
  const double frac = std::min(1.0, static_cast<double>(step - c.schedule.warmup_steps) / static_cast<double>(span));
  return min_lr + 0.5 * (c.optimizer.lr - min_lr) * (1.0 + std::cos(M_PI * frac));
}

}  // namespace lm::train
