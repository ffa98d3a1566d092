#include "train/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "train/device.h"

namespace lm::train {

namespace {

// Bytes saved for backward per token under bf16 autocast, as a counting allocator sees a real step
// allocate them (tests/train/plan_memory_test.cpp varies d, kv, f, L and V one at a time: each
// coefficient is the measured slope). d = d_model, f = d_ff, kv = n_kv_heads·head_dim, a = n_heads,
// T = seq_len, V = vocab. Per block:
//   attention: the fp32 residual into the norm 4d, its bf16 output 2d, rotated q 2d, k and v 4kv,
//              the output into o_proj 2d; the fused (flash) path keeps a log-sum-exp 4a, the
//              reference path the fp32 softmax 4aT and its bf16 copy 2aT
//   MLP:       the fp32 residual sum 4d and the norm's bf16 output 2d, gate and up 4f, their
//              SwiGLU product into down_proj 2f
// With recompute a block keeps its inputs only: the fp32 residual 4d and, in the regrouped add +
// norm loop the CPU runs (TransformerImpl::hidden_add_norm), its bf16 norm 2d. The head (in
// activation_bytes): the final norm's fp32 input 4d and bf16 output 2d, and the logits' bf16
// gradient 2V, which the chunked loss writes during the forward (model/transformer.cpp:
// LinearCrossEntropy) instead of keeping fp32 logits and their softmax (16V). Same method as
// Korthikanti et al. 2022 ("Reducing Activation Recomputation"), who get 34d + 5aT for GPT-3 with
// dropout.
double block_bytes_per_token(const model::ModelConfig& c, int64_t seq_len, bool recompute) {
  const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.d_ff);
  const double kv = static_cast<double>(c.n_kv_heads * c.head_dim()), a = static_cast<double>(c.n_heads);
  const double scores = c.attention == "fused" ? 4 * a : 6 * a * static_cast<double>(seq_len);
  return recompute ? 6 * d : 16 * d + 4 * kv + 6 * f + scores;
}

}  // namespace

double activation_bytes(const model::ModelConfig& c, int64_t batch, int64_t seq_len, bool recompute) {
  const double head = 6 * static_cast<double>(c.d_model) + 2 * static_cast<double>(c.vocab_size);
  const double L = static_cast<double>(c.n_layers);
  return static_cast<double>(batch * seq_len) * (L * block_bytes_per_token(c, seq_len, recompute) + head);
}

double block_activation_bytes(const model::ModelConfig& c, int64_t batch, int64_t seq_len) {
  return static_cast<double>(batch * seq_len) * block_bytes_per_token(c, seq_len, /*recompute=*/false);
}

double implied_mfu(double tokens, double flops_per_token, double hours, int n_gpus, double peak_flops) {
  const double denom = hours * 3600.0 * n_gpus * peak_flops;
  return denom > 0 ? tokens * flops_per_token / denom : 0;
}

namespace {

// A table key as a plan name: "h100 pcie" -> "h100-pcie".
std::string plan_name(const GpuSpec& g) {
  std::string s = g.key;
  for (auto& ch : s) ch = ch == ' ' ? '-' : ch;
  return s;
}

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

// Exact names only: the run-time lookup (find_gpu) matches substrings of nvidia-smi's name,
// under which "h100-pcie" would find the SXM row ("h100") and plan with its 989 TFLOP/s.
const GpuSpec* gpu_by_name(const std::string& name) {
  std::string want = lower(name);
  for (auto& ch : want) ch = ch == '_' || ch == ' ' ? '-' : ch;
  if (want == "h100-sxm") want = "h100";
  for (const auto& g : gpu_table()) {
    if (want == plan_name(g) || lower(name) == lower(g.name)) return &g;
  }
  return nullptr;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> out;
  for (const auto& g : gpu_table()) out.push_back(plan_name(g));
  return out;
}

namespace {

std::string number(double x) { return absl::StrFormat("%g", x); }

// The global batch and the fit flags that reproduce the plan from the preset's defaults.
void set_batch_and_fit_args(const PlanRequest& req, const model::PresetTraining& d, Plan& p) {
  const int64_t per_micro = p.micro_batch * p.seq_len * req.n_gpus;
  bool exact = true;
  if (d.batch_tokens > 0) {
    exact = d.batch_tokens % per_micro == 0;
    p.grad_accum = std::max<int64_t>(1, std::llround(static_cast<double>(d.batch_tokens) / per_micro));
  }
  p.step_tokens = per_micro * p.grad_accum;
  auto& a = p.fit_args;
  // --resume auto: the same command starts the run and continues it after a preemption.
  a = {"--data", "/data/shards", "--preset", req.model.preset};
  if (!req.model_source.empty()) a.insert(a.end(), {"--config", req.model_source});
  // The run is named after what it trains: the preset, or the config file's stem.
  std::string name = req.model.preset;
  if (!req.model_source.empty()) {
    name = req.model_source.substr(req.model_source.find_last_of('/') + 1);
    name = name.substr(0, name.rfind(".json"));
  }
  a.insert(a.end(), {"--out", "/runs/" + name, "--resume", "auto"});
  if (req.tokens != d.tokens) a.insert(a.end(), {"--tokens", number(req.tokens)});
  if (p.seq_len != d.seq_len) a.insert(a.end(), {"--seq-len", std::to_string(p.seq_len)});
  if (p.micro_batch != d.micro_batch) a.insert(a.end(), {"--micro-batch", std::to_string(p.micro_batch)});
  if (req.recompute) a.insert(a.end(), {"--recompute", "on"});
  if (req.zero && req.n_gpus > 1) a.insert(a.end(), {"--zero", "1"});
  if (req.zero && req.sharded_master && req.n_gpus > 1) a.insert(a.end(), {"--master-weights", "sharded"});
  // Without a preset batch (grad_accum 1), or when it does not divide: the accumulation itself.
  if (!exact || (d.batch_tokens == 0 && p.grad_accum != 1))
    a.insert(a.end(), {"--grad-accum", std::to_string(p.grad_accum)});
}

std::string join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& x : args) s += " " + x;
  return s;
}

}  // namespace

int nodes(const PlanRequest& req) {
  const int per = std::max(1, req.gpus_per_node);
  return (req.n_gpus + per - 1) / per;
}

namespace {

// torchrun for more than one GPU: one node starts its ranks itself; several meet at node 0
// through the c10d rendezvous (MASTER_ADDR: node 0's address, the same on every node).
std::string launcher(const PlanRequest& req, const std::string& torchrun) {
  if (req.n_gpus <= 1) return "lmtrain fit";
  if (nodes(req) == 1)
    return absl::StrFormat("%s --no-python --nproc-per-node %d lmtrain fit", torchrun, req.n_gpus);
  return absl::StrFormat(
      "%s --no-python --nnodes %d --nproc-per-node %d --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:29500\" "
      "--rdzv-id lmforge lmtrain fit",
      torchrun, nodes(req), std::min(req.n_gpus, req.gpus_per_node));
}

}  // namespace

std::string fit_command(const Plan& p, const PlanRequest& req) { return launcher(req, "torchrun") + join(p.fit_args); }

std::string docker_command(const Plan& p, const PlanRequest& req) {
  // docker/README.md: the image, /data and /runs volumes; torchrun from the image's venv. Several
  // nodes: the host's network (NCCL and the rendezvous), /runs on a file system every node mounts.
  return absl::StrFormat(
      "docker run --gpus all --ipc=host%s --stop-timeout %d --rm -v \"$PWD/data:/data\" -v \"$PWD/runs:/runs\" "
      "lmforge:cuda %s%s",
      nodes(req) > 1 ? " --network host -e MASTER_ADDR" : "", stop_timeout_s(p),
      launcher(req, "/opt/lmforge/venv/bin/torchrun"), join(p.fit_args));
}

std::string sbatch_script(const Plan& p, const PlanRequest& req) {
  const int per_node = std::min(req.n_gpus, req.gpus_per_node);
  std::string s = "#!/bin/bash\n";
  s += absl::StrFormat("#SBATCH --job-name=lmforge-%s\n#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=1\n",
                       req.model.preset, nodes(req));
  s += absl::StrFormat("#SBATCH --gpus-per-node=%d\n#SBATCH --exclusive\n", per_node);
  // SIGTERM this long before the time limit: fit writes a checkpoint and exits (docs/gpu.md).
  s += absl::StrFormat("#SBATCH --signal=TERM@%d\n#SBATCH --requeue\n", stop_timeout_s(p));
  s += "# /data and /runs must be on a file system every node mounts: fit refuses a run folder it\n"
       "# cannot see from every rank. The same script starts the run and continues it (--resume auto).\n";
  s += "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  s += "srun " + fit_command(p, req) + "\n";
  return s;
}

double checkpoint_bytes(const Plan& p) { return 12.0 * static_cast<double>(p.params); }

int stop_timeout_s(const Plan& p) {
  const double s = kStopMarginS + checkpoint_bytes(p) / kCheckpointWriteBytesPerS;
  return std::max(120, static_cast<int>(std::ceil(s / 10) * 10));
}

namespace {

// The distributed optimizer's bf16 parameters, the 2-D weights but the embedding
// (Trainer::sharded_master_params): not the embedding (with a tied head, the one matrix stays
// fp32 and autocast casts it), the RMSNorm gains (2 per block and the final one, d_model each) or
// Qwen2's q/k/v biases.
int64_t bf16_param_count(const model::ModelConfig& c) {
  const int64_t tied = c.tie_embeddings ? c.vocab_size * c.d_model : 0;
  const int64_t biases = c.attention_bias ? c.n_layers * c.head_dim() * (c.n_heads + 2 * c.n_kv_heads) : 0;
  return model::matmul_param_count(c) - tied - (2 * c.n_layers + 1) * c.d_model - biases;
}

// The terms that do not grow with the micro-batch (MemoryEstimate's comment).
MemoryEstimate fixed_memory(const PlanRequest& req, const Plan& p) {
  const double n = static_cast<double>(p.params), w = req.n_gpus;
  MemoryEstimate m;
  m.weights = 4 * n;    // fp32 master weights
  m.grads = 4 * n;      // fp32 gradients
  m.optimizer = 8 * n;  // AdamW exp_avg + exp_avg_sq, fp32
  m.weight_copies = 2 * static_cast<double>(p.matmul_params);  // bf16, cached by autocast
  if (req.n_gpus > 1) m.grad_buckets = 4 * n;                 // train/grad_sync.cpp: Bucket::flat
  if (req.zero && req.n_gpus > 1) {
    // ZeRO-1 (train/optimizer_shards.h): this GPU's part of the moments, and its gradient shard
    // (the reduce-scatter's output) beside the flat buckets; padding (64 elements per tensor) is noise.
    // The gradients live in the buckets only (GradSync's accumulate: no .grad kept); backward
    // still makes each before its hook adds it in, the largest the embedding's fp32 [V, d], two
    // of them with a tied head until autograd sums them.
    m.optimizer = 8 * n / w;
    m.grad_buckets += 4 * n / w;
    m.grads = 0;
    const double vd = static_cast<double>(req.model.vocab_size * req.model.d_model);
    m.grad_transient = (req.model.tie_embeddings ? 8 : 4) * vd;
  }
  if (req.zero && req.sharded_master && req.n_gpus > 1) {
    // The distributed optimizer: bf16 working weights for the matmuls (M), fp32 for the rest (O);
    // autocast casts only matmul weights that stay fp32 (a tied head); this GPU's fp32 masters of
    // its 1/W of M.
    const double mm = static_cast<double>(p.bf16_params), o = n - mm;
    const double tied = req.model.tie_embeddings ? static_cast<double>(req.model.vocab_size * req.model.d_model) : 0;
    m.weights = 2 * mm + 4 * o;
    m.weight_copies = 2 * tied;
    m.master_weights = 4 * mm / w;
  }
  return m;
}

// What a micro-batch adds on top of the fixed terms.
double micro_batch_bytes(const PlanRequest& req, int64_t batch, int64_t seq_len) {
  return activation_bytes(req.model, batch, seq_len, req.recompute) +
         (req.recompute ? block_activation_bytes(req.model, batch, seq_len) : 0.0);
}
}  // namespace

absl::StatusOr<Plan> make_plan(const PlanRequest& req) {
  LM_RETURN_IF_ERROR(model::validate(req.model));
  if (!(req.tokens > 0)) return absl::InvalidArgumentError(absl::StrFormat("--tokens: must be positive, got %g", req.tokens));
  if (!(req.mfu > 0 && req.mfu <= 1))
    return absl::InvalidArgumentError(absl::StrFormat("--mfu: a fraction in (0, 1], got %g (0.4 means 40%%)", req.mfu));
  if (req.n_gpus <= 0) return absl::InvalidArgumentError(absl::StrFormat("--gpus: must be positive, got %d", req.n_gpus));
  if (req.gpus_per_node <= 0)
    return absl::InvalidArgumentError(absl::StrFormat("--gpus-per-node: must be positive, got %d", req.gpus_per_node));
  if (req.n_gpus > req.gpus_per_node && req.n_gpus % req.gpus_per_node != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "--gpus %d over nodes of %d GPUs leaves a node part-used: give a multiple of --gpus-per-node", req.n_gpus,
        req.gpus_per_node));
  if (req.sharded_master && (!req.zero || req.n_gpus < 2))
    return absl::InvalidArgumentError(absl::StrFormat(
        "--master-weights sharded: the distributed optimizer shards over ZeRO-1's GPUs: give --zero 1 and --gpus > 1 "
        "(got --zero %d, --gpus %d)", req.zero ? 1 : 0, req.n_gpus));
  Plan p;
  const GpuSpec* g = gpu_by_name(req.gpu);
  if (g == nullptr && (req.peak_flops <= 0 || req.memory_bytes <= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--gpu: unknown GPU '%s' (known: %s; h100 is the SXM module; or give --peak-tflops and --memory-gb)", req.gpu,
        absl::StrJoin(gpu_names(), ", ")));
  }
  p.gpu_name = g ? g->name : req.gpu;
  p.peak_flops = req.peak_flops > 0 ? req.peak_flops : g->bf16_flops;
  p.memory_per_gpu = req.memory_bytes > 0 ? req.memory_bytes : g->memory_bytes;
  const model::PresetTraining defaults = model::preset_training(req.model.preset);
  // What fit trains with: the preset's sequence (its max_seq_len for the GPU presets).
  p.seq_len = req.seq_len > 0 ? req.seq_len : std::min(defaults.seq_len, req.model.max_seq_len);
  p.params = model::param_count(req.model);
  p.matmul_params = model::matmul_param_count(req.model);
  p.flops_per_token = model::train_flops_per_token(req.model, p.seq_len);
  p.total_flops = p.flops_per_token * req.tokens;

  p.bf16_params = bf16_param_count(req.model);
  const MemoryEstimate fixed = fixed_memory(req, p);
  const double budget = kUsableMemory * p.memory_per_gpu - fixed.fixed();
  for (int64_t t = 1; t <= 4096; t *= 2) {
    if (micro_batch_bytes(req, t, p.seq_len) <= budget) p.max_micro_batch = t;
  }
  if (req.micro_batch > 0) {
    p.micro_batch = req.micro_batch;
  } else if (micro_batch_bytes(req, defaults.micro_batch, p.seq_len) <= budget) {
    p.micro_batch = defaults.micro_batch;
  } else {
    p.micro_batch = std::max<int64_t>(1, p.max_micro_batch);
  }
  set_batch_and_fit_args(req, defaults, p);
  p.memory = fixed;
  p.memory.activations = activation_bytes(req.model, p.micro_batch, p.seq_len, req.recompute);
  if (req.recompute) p.memory.recompute_block = block_activation_bytes(req.model, p.micro_batch, p.seq_len);
  p.fits = p.memory.total() <= kUsableMemory * p.memory_per_gpu;
  // Recompute runs each block's forward again in backward: 8N instead of 6N per token of matmuls
  // (the MFU stays counted on the model's 6N + 12·L·T·d, as it is reported).
  const double executed = req.recompute ? 4.0 / 3.0 : 1.0;
  p.seconds = executed * p.total_flops / (req.n_gpus * p.peak_flops * req.mfu);
  p.cost = req.price_per_hour * req.n_gpus * p.seconds / 3600.0;
  return p;
}

namespace {

// Whether the micro-batch fits, and what does when it does not: recompute or ZeRO-1 where they
// are off, then a smaller micro-batch, a shorter sequence, a smaller model or a larger GPU.
std::string fit_line(const Plan& p, const PlanRequest& req) {
  if (p.max_micro_batch == 0) {
    std::string sharding;  // what of the sharding lmforge has is off
    if (req.n_gpus > 1 && !req.zero) sharding = ", without ZeRO-1: --zero 1";
    if (req.n_gpus > 1 && req.zero && !req.sharded_master)
      sharding = ", with ZeRO-1 but whole fp32 weights: --master-weights sharded";
    if (req.n_gpus > 1 && req.zero && req.sharded_master) sharding = ", with the distributed optimizer";
    return absl::StrFormat("  DOES NOT FIT even at micro-batch 1 (%s%s; lmforge shards AdamW's moments and, with "
                           "--master-weights sharded, the fp32 master weights, not the working weights or gradients): "
                           "use more GPUs, a shorter --seq, a smaller model or a GPU with more memory\n",
                           req.recompute ? "with activation recompute" : "without activation recompute: --recompute on",
                           sharding);
  }
  if (!p.fits)
    return absl::StrFormat("  micro-batch %d DOES NOT FIT; the largest power of two that fits is %d (--micro-batch %d)\n",
                           p.micro_batch, p.max_micro_batch, p.max_micro_batch);
  return absl::StrFormat("  fits (the largest power-of-two micro-batch that fits: %d)\n", p.max_micro_batch);
}

}  // namespace

namespace {
struct Strategy {
  bool recompute, zero, sharded;
  const char* name;
  const char* cost;
};
// In order of cost: ZeRO-1 adds no FLOPs (the reduce-scatter and all-gather move the all-reduce's
// bytes, plus a copy of 1/G of the weights per step); the distributed optimizer neither (its
// all-gather carries bf16 weights, half ZeRO-1's bytes); recompute adds a forward per block.
constexpr Strategy kStrategies[] = {
    {false, false, false, "data parallel", "no extra cost"},
    {false, true, false, "+ ZeRO-1",
     "AdamW's moments split over the GPUs; no extra FLOPs, the all-reduce's bytes on the wire (--zero 1)"},
    {false, true, true, "+ ZeRO-1 + sharded master",
     "the distributed optimizer: bf16 working weights, fp32 masters and moments split over the GPUs; no extra "
     "FLOPs, its all-gather carries bf16 weights, half ZeRO-1's bytes (--zero 1 --master-weights sharded)"},
    {true, false, false, "+ recompute per block", "one more forward per block: ~1.33x step time (--recompute on)"},
    {true, true, false, "+ ZeRO-1 + recompute", "both: ~1.33x step time (--zero 1 --recompute on)"},
    {true, true, true, "+ ZeRO-1 + sharded master + recompute",
     "the distributed optimizer and recompute: ~1.33x step time (--zero 1 --master-weights sharded --recompute on)"},
};

// Whether `st` is one make_cheapest_plan may try for `req`: the sharding strategies need more
// than one GPU, and a knob not left to it keeps req's value.
bool may_try(const Strategy& st, const PlanRequest& req, bool choose_recompute, bool choose_zero, bool choose_master) {
  if (st.zero && req.n_gpus < 2) return false;  // one GPU has nothing to shard over
  return (choose_recompute || st.recompute == req.recompute) && (choose_zero || st.zero == req.zero) &&
         (choose_master || st.sharded == req.sharded_master);
}
}  // namespace

absl::StatusOr<Plan> make_cheapest_plan(PlanRequest& req, std::string* strategies, bool choose_recompute,
                                        bool choose_zero, bool choose_master) {
  // A strategy is worth its cost only while the cheaper ones cannot reach the micro-batch asked
  // for (or the preset's), or at least kUsefulMicroBatch sequences, which keep a GPU busy; the
  // rest of the global batch comes from accumulation.
  const int64_t wanted = req.micro_batch > 0 ? req.micro_batch : model::preset_training(req.model.preset).micro_batch;
  const int64_t useful = std::min<int64_t>(wanted, kUsefulMicroBatch);
  std::string rows;
  const Strategy* chosen = nullptr;
  Plan best;
  for (const Strategy& st : kStrategies) {
    if (!may_try(st, req, choose_recompute, choose_zero, choose_master)) continue;
    PlanRequest r = req;
    r.recompute = st.recompute;
    r.zero = st.zero;
    r.sharded_master = st.sharded;
    LM_ASSIGN_OR_RETURN(Plan p, make_plan(r));
    rows += absl::StrFormat("  %-38s largest micro-batch %s; %.2f GB at micro-batch %d; %s\n", st.name,
                            p.max_micro_batch == 0 ? std::string("none fits") : std::to_string(p.max_micro_batch),
                            p.memory.total() / 1e9, p.micro_batch, st.cost);
    const bool enough = chosen != nullptr && best.max_micro_batch >= useful;
    if (chosen == nullptr || (!enough && p.max_micro_batch > best.max_micro_batch)) {
      chosen = &st;
      best = p;
    }
  }
  if (chosen == nullptr) {  // all fixed, or a sharding asked on one GPU: the plan as asked (or its error)
    strategies->clear();
    return make_plan(req);
  }
  req.recompute = chosen->recompute;
  req.zero = chosen->zero;
  req.sharded_master = chosen->sharded;
  *strategies = absl::StrFormat("strategies (chosen: %s):\n", strategy_name(req)) + rows;
  return best;
}

std::string strategy_name(const PlanRequest& req) {
  std::string name = "data parallel";
  if (req.zero && req.n_gpus > 1) name += " + ZeRO-1";
  if (req.zero && req.sharded_master && req.n_gpus > 1) name += " + sharded master";
  if (req.recompute) name += " + recompute";
  return name;
}

namespace {
// The fixed terms per GPU, each named as it is kept.
std::string memory_line(const Plan& p, const PlanRequest& req) {
  auto gb = [](double b) { return absl::StrFormat("%.2f GB", b / 1e9); };
  const bool sharded = req.zero && req.sharded_master && req.n_gpus > 1;
  std::string s = absl::StrFormat("memory per GPU at micro-batch %d × %d (bf16 autocast, %s, %s attention):\n",
                                  p.micro_batch, p.seq_len,
                                  sharded ? "bf16 working weights, fp32 masters sharded" : "fp32 master weights",
                                  req.model.attention);
  if (sharded) {
    s += absl::StrFormat("  weights %s (bf16 %.1fM in matmuls, fp32 the other %.1fM) + grads 0 (added into the "
                         "buckets; the embedding's in flight %s) + AdamW %s (1/%d of the moments) + fp32 master "
                         "weights %s, 1/%d sharded",
                         gb(p.memory.weights), p.bf16_params / 1e6, (p.params - p.bf16_params) / 1e6,
                         gb(p.memory.grad_transient), gb(p.memory.optimizer), req.n_gpus,
                         gb(p.memory.master_weights), req.n_gpus);
  } else {
    const bool zero = req.zero && req.n_gpus > 1;
    s += absl::StrFormat("  weights %s + grads %s + AdamW %s%s", gb(p.memory.weights),
                         zero ? absl::StrFormat("0 (in the buckets; the embedding's in flight %s)", gb(p.memory.grad_transient))
                              : gb(p.memory.grads),
                         gb(p.memory.optimizer), zero ? absl::StrFormat(" (ZeRO-1: 1/%d of the moments)", req.n_gpus) : "");
  }
  s += absl::StrFormat(" + bf16 weight copies %s%s = %s\n", gb(p.memory.weight_copies),
                       p.memory.grad_buckets > 0 ? " + gradient buckets " + gb(p.memory.grad_buckets) : "",
                       gb(p.memory.fixed()));
  return s;
}
}  // namespace

std::string format_plan(const Plan& p, const PlanRequest& req) {
  auto gb = [](double b) { return absl::StrFormat("%.2f GB", b / 1e9); };
  std::string s;
  const std::string name = req.model_source.empty() ? req.model.preset : req.model.preset + " + " + req.model_source;
  s += absl::StrFormat("model %s: %.1fM params (%.1fM in matmuls), d %d, %d layers, %d heads (%d kv), vocab %d\n",
                       name, p.params / 1e6, p.matmul_params / 1e6, req.model.d_model,
                       req.model.n_layers, req.model.n_heads, req.model.n_kv_heads, req.model.vocab_size);
  s += absl::StrFormat("compute: %.3g FLOPs/token (6N + 12·L·T·d at T = %d) × %.3g tokens = %.3g FLOPs\n",
                       p.flops_per_token, p.seq_len, req.tokens, p.total_flops);
  s += absl::StrFormat("device: %d × %s, %.0f TFLOP/s dense bf16, %.0f GB each\n", req.n_gpus, p.gpu_name,
                       p.peak_flops / 1e12, p.memory_per_gpu / 1e9);
  s += memory_line(p, req);
  if (p.memory.recompute_block > 0)
    s += absl::StrFormat("  recompute per block: the blocks' inputs %s + one block rebuilt in backward %s\n",
                         gb(p.memory.activations), gb(p.memory.recompute_block));
  s += absl::StrFormat("  activations %s -> total %s of %s usable (%.0f%% of %s)\n",
                       gb(p.memory.activations + p.memory.recompute_block),
                       gb(p.memory.total()), gb(kUsableMemory * p.memory_per_gpu), 100 * kUsableMemory,
                       gb(p.memory_per_gpu));
  s += fit_line(p, req);
  s += absl::StrFormat("batch: %d x %d x accum %d x %d GPU(s) = %d tokens per step\n", p.micro_batch, p.seq_len,
                       p.grad_accum, req.n_gpus, p.step_tokens);
  s += absl::StrFormat("time at MFU %.1f%% (%s): %.1f h (%.2f days)", 100 * req.mfu, req.mfu_source,
                       p.seconds / 3600, p.seconds / 86400);
  if (req.price_per_hour > 0)
    s += absl::StrFormat("; cost at $%.2f/GPU-hour: $%.0f", req.price_per_hour, p.cost);
  s += "\n";
  s += absl::StrFormat("checkpoint: %s (fp32 weights and AdamW's moments); a stop needs ~%d s to write it at "
                       "%.1f GB/s (docker --stop-timeout, sbatch --signal)\n",
                       gb(checkpoint_bytes(p)), stop_timeout_s(p), kCheckpointWriteBytesPerS / 1e9);
  if (nodes(req) > 1)
    s += absl::StrFormat("nodes: %d × %d GPUs; run the fit line on every node with MASTER_ADDR = node 0's address "
                         "(or --sbatch FILE), /data and /runs on a file system all nodes mount\n",
                         nodes(req), req.gpus_per_node);
  s += "fit: " + fit_command(p, req) + "\n";
  s += "docker: " + docker_command(p, req) + "\n";
  return s;
}

}  // namespace lm::train
