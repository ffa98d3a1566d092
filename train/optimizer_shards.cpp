#include "train/optimizer_shards.h"

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>

#include <algorithm>
#include <functional>
#include <map>

namespace lm::train {

OptimizerShards::OptimizerShards(std::vector<torch::Tensor> params, int rank, int world, int64_t bucket_bytes,
                                 std::vector<bool> bf16_working)
    : params_(std::move(params)), rank_(rank) {
  TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "OptimizerShards: rank ", rank, " of ", world);
  TORCH_CHECK(bf16_working.empty() || bf16_working.size() == params_.size(), "OptimizerShards: ",
              bf16_working.size(), " bf16_working flags for ", params_.size(), " parameters");
  std::vector<int> kind(bf16_working.begin(), bf16_working.end());
  plan_ = plan_buckets(params_, bucket_bytes, kShardAlign, kShardAlign * world, kind);
  masters_.assign(plan_.size(), torch::Tensor());
  parts_.assign(params_.size(), {});
  std::vector<int64_t> shard_offset(params_.size(), 0);  // parameter -> where its part lies in the bucket's shard
  for (size_t b = 0; b < plan_.size(); ++b) {
    const BucketPlan& bp = plan_[b];
    const auto opts = params_[bp.params.back()].options().requires_grad(false);
    flats_.push_back(torch::zeros({bp.numel}, opts));  // padding stays zero: it adds nothing to a sum
    weights_.push_back(torch::zeros({bp.numel}, opts));
    const int64_t size = bp.numel / world, mine = rank * size;
    shards_.push_back(torch::zeros({size}, opts));
    // Rank r owns elements [r·size, (r+1)·size) of the bucket: of each parameter, the overlap.
    for (size_t j = 0; j < bp.params.size(); ++j) {
      const size_t k = bp.params[j];
      const int64_t at = bp.offset[j];
      const int64_t lo = std::max(at, mine), hi = std::min(at + params_[k].numel(), mine + size);
      into_weights(k, weights_[b].narrow(0, at, params_[k].numel()));
      if (hi <= lo) continue;  // none of it is this rank's
      parts_[k] = {lo - at, hi - lo, shards_[b].narrow(0, lo - mine, hi - lo), {}};
      shard_offset[k] = lo - mine;
    }
    if (kind.empty() || kind[bp.params.front()] == 0) continue;
    // The fp32 masters of this rank's shard (taken again from the weights when they turn bf16).
    masters_[b] = weights_[b].narrow(0, mine, size).clone();
    // Every parameter of the bucket, this rank's part or not: AdamW's empty slot of a part on
    // another rank must not be a view of the fp32 weights (it would keep them alive).
    for (size_t k : bp.params)
      parts_[k].value = masters_[b].narrow(0, parts_[k].len > 0 ? shard_offset[k] : 0, parts_[k].len);
  }
}

void OptimizerShards::use_bf16_working_weights() {
  torch::NoGradGuard no_grad;
  if (bf16_) return;
  for (size_t b = 0; b < plan_.size(); ++b) {
    if (!masters_[b].defined()) continue;
    const int64_t size = masters_[b].numel();
    masters_[b].copy_(weights_[b].narrow(0, rank_ * size, size));  // in place: AdamW holds views of it
    weights_[b] = weights_[b].to(torch::kBFloat16);
    for (size_t j = 0; j < plan_[b].params.size(); ++j) {
      auto& p = params_[plan_[b].params[j]];
      p.set_data(weights_[b].narrow(0, plan_[b].offset[j], p.numel()).view(p.sizes()));
    }
  }
  bf16_ = true;
}

int64_t OptimizerShards::master_bytes() const {
  int64_t n = 0;
  for (const auto& m : masters_)
    if (m.defined()) n += m.numel() * m.element_size();
  return n;
}

model::NamedTensors OptimizerShards::master_weights(const std::vector<std::string>& names,
                                                    const StartCollective& all_gather) const {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(names.size() == params_.size(), "OptimizerShards::master_weights: ", names.size(), " names for ",
              params_.size(), " parameters");
  model::NamedTensors out;
  if (!bf16_) return out;  // the parameters themselves are the fp32 weights
  for (size_t b = 0; b < plan_.size(); ++b) {  // one bucket at a time, straight to the host
    if (!masters_[b].defined()) continue;
    auto flat = torch::empty({plan_[b].numel}, masters_[b].options());
    all_gather(flat, masters_[b])();
    for (size_t j = 0; j < plan_[b].params.size(); ++j) {
      const size_t k = plan_[b].params[j];
      out.emplace_back(names[k], flat.narrow(0, plan_[b].offset[j], params_[k].numel())
                                     .view(params_[k].sizes())
                                     .to(torch::kCPU, false, true));
    }
  }
  return out;
}

// The parameter's values move into its slot of the bucket's weight buffer and the parameter
// becomes a view of that slot (set_data keeps the same leaf, its AccumulateGrad node and hooks):
// the all-gather then writes the weights in place (DeepSpeed's flat parameter buffers).
void OptimizerShards::into_weights(size_t k, torch::Tensor slot) {
  torch::NoGradGuard no_grad;
  auto& p = params_[k];
  slot.copy_(p.detach().reshape({-1}));
  p.set_data(slot.view(p.sizes()));
}

GradNorm OptimizerShards::clip_grad_norm(double max_norm, const StartSum& all_reduce_sum) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> present;        // parameters with a gradient this step (the same on every rank)
  std::vector<torch::Tensor> grads;    // their parts on this rank
  std::vector<int64_t> slot;           // grads[i] belongs to present[slot[i]]
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!params_[k].grad().defined()) continue;
    present.push_back(static_cast<int64_t>(k));
    if (parts_[k].len == 0) continue;
    grads.push_back(parts_[k].grad);
    slot.push_back(static_cast<int64_t>(present.size()) - 1);
  }
  if (present.empty()) return {torch::zeros({}, torch::kFloat32), torch::full({}, -1, torch::kInt64), {}};
  const auto device = params_.front().device();
  // Each parameter's squared norm: this rank's parts, summed over ranks. Then as clip_grad_norm
  // does: the norm of the per-tensor norms (the sums run in another order: ~1e-7 relative).
  auto sq = torch::zeros({static_cast<int64_t>(present.size())}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  if (!grads.empty()) {
    auto norms = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat32);
    sq.index_add_(0, torch::tensor(slot, torch::kInt64).to(device), norms * norms);
  }
  all_reduce_sum(sq)();
  auto norms = sq.sqrt();  // [present]
  auto total = norms.norm(2);
  auto bad = norms.isfinite().logical_not();
  auto first_bad = torch::where(bad.any(), bad.to(torch::kInt32).argmax(), -1);
  if (max_norm > 0 && !grads.empty()) {
    auto coef = torch::clamp_max((total + 1e-6).reciprocal() * max_norm, 1.0);  // as train/optim.cpp
    at::_foreach_mul_(grads, coef);
  }
  return {total, first_bad, std::move(present)};
}

void OptimizerShards::gather_params(const StartCollective& all_gather) {
  torch::NoGradGuard no_grad;
  // AdamW updated this rank's shard inside weights_ (the parameters are views of it); the gradient
  // shard, free until the next backward, carries it (an all-gather's input must not overlap its
  // output), and the all-gather writes every rank's shard into the parameters directly.
  // With masters (the distributed optimizer) AdamW updated those instead, and what goes out is
  // their rounding to the working weights' dtype, in the front half of the fp32 shard's bytes.
  std::vector<std::function<void()>> waits;
  for (size_t b = 0; b < plan_.size(); ++b) {
    const int64_t size = shards_[b].numel();
    auto send = shards_[b].view(weights_[b].scalar_type()).narrow(0, 0, size);
    send.copy_(masters_[b].defined() ? masters_[b] : weights_[b].narrow(0, rank_ * size, size));
    waits.push_back(all_gather(weights_[b], send));
  }
  for (auto& w : waits) w();
}

}  // namespace lm::train
