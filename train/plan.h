// lmtrain plan: what a pretraining run costs before renting the machine. Pure arithmetic from
// the model config and the GPU table (train/device.cpp); no tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace lm::train {

struct GpuSpec;  // train/device.h

struct PlanRequest {
  model::ModelConfig model;
  double tokens = 2e9;       // cmd_plan: the preset's budget (model::preset_training) unless --tokens
  std::string gpu = "h100";
  int n_gpus = 1;
  int64_t seq_len = 0;       // 0 = the preset's training sequence (model::preset_training), at most max_seq_len
  int64_t micro_batch = 0;   // 0 = the preset's default when it fits, else the largest power of two that fits
  double mfu = 0.4;          // model FLOPs utilisation the time and cost are priced at
  // Where `mfu` comes from, said next to every time and cost: lmforge has no GPU measurement yet,
  // so the default is an assumption, and a plan must not read as a promise.
  std::string mfu_source = "assumed, not measured: no lmforge run on a GPU has been measured yet (bench/results)";
  int gpus_per_node = 8;     // more GPUs than this: several nodes (torchrun --nnodes, sbatch)
  std::string model_source;  // "" = the preset; else the config file the model comes from (fit --config)
  bool recompute = false;    // activation recompute per block (fit --recompute on)
  bool zero = false;         // ZeRO-1 over the GPUs (fit --zero 1): AdamW's moments 1/n_gpus per GPU
  // The distributed optimizer (fit --zero 1 --master-weights sharded, Megatron-LM style): bf16
  // working weights for the matmuls, their fp32 masters 1/n_gpus per GPU beside the moments, no
  // .grad tensors (each micro-batch's gradient goes into the fp32 buckets). Needs zero and > 1 GPU.
  bool sharded_master = false;
  double price_per_hour = 0; // per GPU; 0 = no cost line
  double peak_flops = 0;     // override of the table's dense bf16 peak
  double memory_bytes = 0;   // override of the table's memory per GPU
};

// Bytes per GPU, mixed precision as lmtrain fit trains: fp32 master weights, fp32 grads,
// AdamW's two fp32 moments, the bf16 copies of the weights autocast keeps, data parallel's bucket
// copy of the gradients, bf16 activations. Each term is checked against a counting allocator on a
// real CPU step (tests/train/plan_memory_test.cpp). With ZeRO-1 (train/optimizer_shards.h) a GPU
// keeps 1/n_gpus of the moments (8N/n) and its gradient shard (4N/n) beside the buckets, which
// hold the gradients (no .grad kept: grads 0, grad_transient in flight); weights stay whole on
// every GPU (no ZeRO-2/3). With the distributed optimizer
// (sharded_master) the matmul weights (M of them) are bf16 and the rest (O = N - M: embedding,
// norms) fp32: weights 2M + 4O, no gradients, bf16 casts only of a tied head (fp32), the buckets
// as ZeRO-1, AdamW 8N/n and master_weights 4M/n.
struct MemoryEstimate {
  double weights = 0, grads = 0, optimizer = 0;
  double master_weights = 0;  // distributed optimizer: the fp32 masters of the bf16 weights, 1/n_gpus per GPU
  // bf16 casts of every matmul weight: autocast caches them from the first micro-batch's forward
  // until the step's last backward (Trainer::accumulate_gradients holds one AutocastGuard).
  double weight_copies = 0;
  double grad_buckets = 0;  // more than one GPU: GradSync's flat fp32 buckets, a copy of every gradient (ZeRO-1: + its shard)
  double activations = 0;   // for one micro-batch, every layer's saved tensors (with recompute: their inputs)
  double recompute_block = 0;  // recompute: the one block whose activations backward rebuilds at a time
  // ZeRO-1 and the distributed optimizer: with no .grad kept, backward still makes each gradient before its
  // hook adds it into the bucket; the largest is the embedding's, fp32 [V, d], and with a tied
  // head two of them (the head's and the lookup's) until autograd sums them. (Otherwise the
  // gradients are kept whole, in `grads`, and this is inside them.)
  double grad_transient = 0;
  double fixed() const {
    return weights + grads + optimizer + master_weights + weight_copies + grad_buckets + grad_transient;
  }
  double total() const { return fixed() + activations + recompute_block; }
};

// The fraction of a GPU's memory a plan may fill; the rest is head-room for the allocator's
// fragmentation, workspaces and the CUDA context.
inline constexpr double kUsableMemory = 0.9;

struct Plan {
  std::string gpu_name;
  double peak_flops = 0, memory_per_gpu = 0;
  int64_t params = 0, matmul_params = 0, seq_len = 0;
  // The parameters the distributed optimizer keeps in bf16: the block linears (with their biases)
  // and an untied head; not the embedding, a tied head or the norms.
  int64_t bf16_params = 0;
  double flops_per_token = 0;  // 6N + 12·L·T·d
  double total_flops = 0;
  int64_t micro_batch = 0;
  int64_t max_micro_batch = 0;  // the largest power of two that fits kUsableMemory; 0: not even 1
  MemoryEstimate memory;        // at micro_batch
  bool fits = true;             // memory.total() within kUsableMemory of memory_per_gpu
  double seconds = 0, cost = 0;
  // The global batch fit will use: the preset's batch_tokens over micro_batch·seq·GPUs, rounded
  // to a whole grad_accum (>= 1) when it does not divide.
  int64_t grad_accum = 1, step_tokens = 0;
  // `lmtrain fit` arguments (after "lmtrain fit") that train what this plan assumes: the preset,
  // and a flag only where the plan differs from the preset's defaults (docs/gpu.md).
  std::vector<std::string> fit_args;
};

// The command lines a renter runs: `lmtrain fit ...` (torchrun for > 1 GPU; with more GPUs than
// one node has, torchrun's c10d rendezvous on every node) and the same inside
// `docker run --gpus all --ipc=host ...` with docker/README.md's image and volumes.
std::string fit_command(const Plan& plan, const PlanRequest& req);
std::string docker_command(const Plan& plan, const PlanRequest& req);
// A Slurm batch file that runs fit_command on every node of a multi-node plan.
std::string sbatch_script(const Plan& plan, const PlanRequest& req);
int nodes(const PlanRequest& req);  // GPUs over gpus_per_node, rounded up

// The bytes of one checkpoint (fp32 weights + AdamW's two moments) and the seconds a stop needs
// to write it at kCheckpointWriteBytesPerS plus kStopMargin: what `docker run --stop-timeout` gets.
inline constexpr double kCheckpointWriteBytesPerS = 0.5e9;  // a rented node's local NVMe, written by one rank
inline constexpr double kStopMarginS = 30;
double checkpoint_bytes(const Plan& plan);
int stop_timeout_s(const Plan& plan);

// Activation bytes for one micro-batch of `batch` × `seq_len` (formula in docs/distributed.md);
// with `recompute`, what the forward keeps: each block's inputs and the head's tensors.
double activation_bytes(const model::ModelConfig& cfg, int64_t batch, int64_t seq_len, bool recompute = false);
// One block's saved tensors for a micro-batch: what recompute rebuilds in backward, one at a time.
double block_activation_bytes(const model::ModelConfig& cfg, int64_t batch, int64_t seq_len);

// The GPU a --gpu name means: a row of train/device.cpp's table (the one the trainer's MFU reads
// at run time) by its plan name (gpu_names(): h100-pcie, ...; any case, '_' or ' ' for '-',
// h100-sxm for h100) or its full name ("NVIDIA H100 PCIe"); nullptr for anything else.
const GpuSpec* gpu_by_name(const std::string& name);
// The plan names of the table's rows, in table order: "h200", "h100-pcie", ...
std::vector<std::string> gpu_names();

// Errors: unknown GPU (names the known ones), non-positive tokens/mfu, sharded_master without
// zero or on one GPU (InvalidArgument).
absl::StatusOr<Plan> make_plan(const PlanRequest& req);

// The cheapest memory strategy that fits, for an `auto` choice, in order of cost: plain data
// parallel, ZeRO-1 (more than one GPU; no extra FLOPs), ZeRO-1 + sharded master weights (the
// distributed optimizer; no extra FLOPs), activation recompute (a third more FLOPs), then
// recompute with each of the two; the first whose largest micro-batch reaches the one wanted (or
// kUsefulMicroBatch), else the one that fits the most. req.recompute, req.zero and
// req.sharded_master are set to the choice; `choose_recompute` / `choose_zero` /
// `choose_master` false keep req's value of that one. `strategies` gets one line per strategy
// with its largest micro-batch, memory and cost.
absl::StatusOr<Plan> make_cheapest_plan(PlanRequest& req, std::string* strategies, bool choose_recompute = true,
                                        bool choose_zero = true, bool choose_master = true);
// The strategy req asks for, as make_cheapest_plan's lines name it: "data parallel + ZeRO-1 +
// sharded master + recompute" (the parts that are on).
std::string strategy_name(const PlanRequest& req);
inline constexpr int64_t kUsefulMicroBatch = 4;  // sequences per GPU that keep it busy (seq ~2048)

// MFU that a finished run implies: tokens × FLOPs/token / (hours × GPUs × peak).
double implied_mfu(double tokens, double flops_per_token, double hours, int n_gpus, double peak_flops);

// Human-readable report of a plan (units on every number).
std::string format_plan(const Plan& plan, const PlanRequest& req);

}  // namespace lm::train
