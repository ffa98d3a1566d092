// Sharded optimizer state, ZeRO stage 1 (Rajbhandari et al. 2020, arXiv:1910.02054; the layout of
// Megatron-LM's distributed optimizer): the gradient buckets of data parallel are cut into `world`
// equal shards; each bucket is reduce-scattered (not all-reduced) on the last micro-batch, every
// rank runs AdamW on its own shard only (so it keeps 1/world of the moments), and an all-gather
// of the updated shards gives every rank the whole parameters again. The collectives move the
// same bytes as the all-reduce (a ring all-reduce is a reduce-scatter then an all-gather).
//
// The parameters become views into flat weight buffers laid out as the buckets, so the all-gather
// writes the weights in place. Gradients stay ordinary .grad tensors: the hooks copy them into
// the gradient buckets as for data parallel (gradients as bucket views are not done).
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
  OptimizerShards(std::vector<torch::Tensor> params, int rank, int world, int64_t bucket_bytes);

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
  // AdamW's state with each parameter's whole moments (every rank's parts gathered, on the host):
  // the format of a data-parallel checkpoint. Every rank must call it (collectives).
  // `names`: the parameters' names, in `params`' order (AdamW's keys are "<name>.exp_avg", ...).
  model::NamedTensors full_state(const std::vector<std::string>& names, const model::NamedTensors& local,
                                 const StartCollective& all_gather) const;

 private:
  // Starts the all-gather of bucket b: this rank's part of `values` (one tensor per parameter:
  // its [len] part, or the whole parameter when `whole`) written into `send` (padding zero), and
  // every rank's gathered into `out` ([numel]). Returns the wait.
  std::function<void()> gather(size_t b, const std::vector<torch::Tensor>& values, bool whole, const torch::Tensor& send,
                               const torch::Tensor& out, const StartCollective& all_gather) const;

  std::vector<torch::Tensor> params_;
  int rank_ = 0, world_ = 1;
  std::vector<BucketPlan> plan_;
  void into_weights(size_t k, torch::Tensor slot);

  std::vector<torch::Tensor> flats_, shards_;
  std::vector<torch::Tensor> weights_;  // per bucket [numel]: the parameters are views into it
  std::vector<ParamPart> parts_;
  std::vector<size_t> bucket_of_;        // parameter -> bucket
  std::vector<int64_t> shard_offset_;    // parameter -> where its part lies in the bucket's shard
};

}  // namespace lm::train
