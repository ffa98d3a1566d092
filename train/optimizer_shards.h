// Sharded optimizer state, ZeRO stage 1 (Rajbhandari et al. 2020, arXiv:1910.02054; the layout of
// Megatron-LM's distributed optimizer): the gradient buckets of data parallel are cut into `world`
// equal shards; each bucket is reduce-scattered (not all-reduced) on the last micro-batch, every
// rank runs AdamW on its own shard only (so it keeps 1/world of the moments), and an all-gather
// of the updated shards gives every rank the whole parameters again. The collectives move the
// same bytes as the all-reduce (a ring all-reduce is a reduce-scatter then an all-gather).
//
// The parameters become views into flat weight buffers laid out as the buckets, so the all-gather
// writes the weights in place. The gradients live in the buckets only: GradSync's `accumulate`
// hooks add each micro-batch's .grad into its bucket and drop it (no whole .grad kept).
//
// The distributed optimizer (Megatron-LM's, distributed.master_weights sharded) goes one step
// further for the matmul weights: their buckets hold bf16 working weights (what the matmuls read
// under autocast anyway), and each rank keeps the fp32 master weights of its shard only, beside
// its moments. AdamW updates the masters; the all-gather carries their bf16 rounding (half of
// ZeRO-1's bytes). The gradient buckets stay fp32 and accumulate the micro-batches themselves
// (GradSync's `accumulate`), so per parameter a GPU holds 2 (bf16 weight) + 4 (fp32 bucket) bytes
// plus (4 master + 8 moments + 4 gradient shard) / world, instead of ZeRO-1's 4 + 2 (autocast's
// copy) + 4 (bucket) + 12 / world. Given the same masters, the forward reads the same
// bf16 values as autocast's casts of fp32 weights and the gradients sum in fp32 in the same order,
// so a run is bit-identical to ZeRO-1 (checked by the ZeRO-1 test).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "train/grad_sync.h"
#include "train/optim.h"

namespace lm::train {

// Every parameter starts at a multiple of this many elements in its bucket and every shard is a
// multiple of it, so each rank's part of a parameter starts at a multiple of 64 elements of that
// parameter: a vectorised kernel (AdamW, the norm) splits a part exactly where it splits the
// whole tensor, and the update is bit-identical to data parallel's (checked by the ZeRO-1 test).
inline constexpr int64_t kShardAlign = 64;

class OptimizerShards {
 public:
  // `params` as GradSync gets them (registration order). Buckets of about `bucket_bytes`. Each
  // parameter's storage moves into a flat weight buffer of its bucket (the parameter, the same
  // leaf, becomes a view of it): build this before anything keeps a parameter's old storage.
  // `bf16_working` (empty, or one per parameter): these parameters get fp32 masters sharded here
  // and become bf16 at use_bf16_working_weights(); their buckets hold no other parameter.
  OptimizerShards(std::vector<torch::Tensor> params, int rank, int world, int64_t bucket_bytes,
                  std::vector<bool> bf16_working = {});

  const std::vector<BucketPlan>& plan() const { return plan_; }
  // The zeroed flat buckets ([numel]) and this rank's gradient shards ([numel / world]), for
  // GradSync's ZeRO-1 constructor (they share the storage).
  const std::vector<torch::Tensor>& flats() const { return flats_; }
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  // One part per parameter (AdamW's ZeRO-1 constructor), its gradient a view into a shard.
  const std::vector<ParamPart>& parts() const { return parts_; }

  // The gradient norm over every rank's shards (an all-reduce of each parameter's squared norm),
  // then clipping of this rank's shards by min(1, max_norm / (norm + 1e-6)) when max_norm > 0:
  // train/optim.h's clip_grad_norm on the whole gradient, with `present` and `first_bad` the
  // same. Parameters without a .grad this step take no part.
  GradNorm clip_grad_norm(double max_norm, const StartSum& all_reduce_sum);
  // After AdamW updated this rank's parts: every rank's parts into every rank's parameters.
  void gather_params(const StartCollective& all_gather);
  // The distributed optimizer's switch, once the weights are final for the start (restored,
  // broadcast, checked): the masters take this rank's fp32 values, and the bf16_working
  // parameters become bf16 views of bf16 buckets (the fp32 ones are freed). Before it the
  // parameters are fp32 and train as ZeRO-1's; call it before GradSync's hooks exist (their
  // AccumulateGrad nodes must see the bf16 parameters).
  void use_bf16_working_weights();
  bool bf16_working() const { return bf16_; }
  // The fp32 master weights of the bf16_working parameters, whole, on the host, by name: what a
  // checkpoint saves for them (its format stays fp32). Every rank must call it (collectives).
  model::NamedTensors master_weights(const std::vector<std::string>& names, const StartCollective& all_gather) const;
  // Bytes of the fp32 master weights this rank holds (0 without bf16_working).
  int64_t master_bytes() const;

 private:
  std::vector<torch::Tensor> params_;
  int rank_ = 0;
  std::vector<BucketPlan> plan_;
  void into_weights(size_t k, torch::Tensor slot);

  std::vector<torch::Tensor> flats_, shards_;
  std::vector<torch::Tensor> weights_;  // per bucket [numel]: the parameters are views into it
  std::vector<torch::Tensor> masters_;  // per bucket [numel / world] fp32 for a bf16_working bucket, else undefined
  bool bf16_ = false;                   // use_bf16_working_weights ran
  std::vector<ParamPart> parts_;
};

}  // namespace lm::train
