// Gradient averaging across data-parallel ranks, in flat buckets, either overlapped with backward
// (autograd hooks launch each bucket's all-reduce as soon as its gradients are final, the design of
// PyTorch DDP's Reducer, Li et al. 2020, arXiv:2006.15704) or after the whole backward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace lm::train {

// Starts an in-place SUM all-reduce of `flat` across ranks; the returned function blocks until it
// is done. Comm::start_sum in production, a recording fake in tests.
using StartSum = std::function<std::function<void()>(torch::Tensor flat)>;
// Starts a collective from `in` into `out` (a SUM reduce-scatter or an all-gather, Comm's
// start_reduce_scatter / start_all_gather); the returned function blocks until it is done.
using StartCollective = std::function<std::function<void()>(torch::Tensor out, torch::Tensor in)>;

// One flat bucket: which parameters it holds and where.
struct BucketPlan {
  std::vector<size_t> params;   // indexes into the parameter list, in bucket order
  std::vector<int64_t> offset;  // element offset of each parameter in the flat buffer
  int64_t numel = 0;            // the flat buffer's length (padding included)
};

// Buckets of up to about `bucket_bytes` in reverse registration order (the order backward
// produces gradients), one dtype and device each. Each parameter starts at a multiple of `align`
// elements and each bucket's length is a multiple of `pad_to` (ZeRO-1 cuts it into equal shards);
// 1 and 1 pack them densely, as data parallel does. `kind` (empty, or one per parameter): a
// bucket holds parameters of one kind only (the distributed optimizer's bf16 working weights).
std::vector<BucketPlan> plan_buckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes,
                                     int64_t align = 1, int64_t pad_to = 1, const std::vector<int>& kind = {});

struct GradSyncStats {
  int64_t buckets = 0;
  int64_t launched_in_backward = 0;  // buckets whose all-reduce started from a hook (last sync)
  double wait_s = 0;                 // time finish() blocked: waits + scatter back (last sync)
};

class GradSync {
 public:
  // `params` in registration order (model->parameters()). Overlapped buckets hold them in reverse
  // order (the order backward produces their gradients), each up to about `bucket_bytes`.
  GradSync(std::vector<torch::Tensor> params, int world, StartSum start_sum, bool overlap,
           int64_t bucket_bytes);
  // ZeRO-1 and the distributed optimizer (train/optimizer_shards.h): the buckets of `plan` on the
  // given zeroed `flats`, each reduce-scattered into `shards[b]` ([numel / world]) from the hooks;
  // finish() leaves the averaged shard there. Every micro-batch's gradient is added into the
  // (fp32) buckets by the hook and the parameter's .grad dropped at once (`accumulate`), so no
  // .grad outlives its parameter's backward; finish() then gives each parameter that had a
  // gradient an empty placeholder .grad (defined: "trained this step" for clipping, AdamW and
  // frozen groups).
  GradSync(std::vector<torch::Tensor> params, int world, const std::vector<BucketPlan>& plan,
           std::vector<torch::Tensor> flats, std::vector<torch::Tensor> shards, StartCollective reduce_scatter);
  ~GradSync();  // removes the hooks
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Call at the start of each step, before its first backward: with shards, the buckets' sums
  // start over (a step dropped midway leaves partial ones). Otherwise nothing.
  void begin_step();
  // Call before each backward: `sync` is true only for the last micro-batch of a step; the others
  // accumulate locally (DDP's no_sync), so one all-reduce per step carries the summed gradient.
  void before_backward(bool sync);
  // After the last backward: starts what is not started yet, waits for every bucket, writes
  // sum/world back into each .grad (ZeRO-1: into the bucket's shard). After it returns the
  // gradients are final (clip, step).
  void finish();

  // The collectives carry bf16 instead of fp32 (distributed.reduce_dtype bf16: half the bytes on
  // the wire): each bucket is rounded to bf16 when it starts, summed in bf16 across ranks, and
  // widened back to fp32 before the average. The overlapped buckets only (DDP's and ZeRO-1's).
  void set_reduce_dtype(torch::ScalarType dtype);

  bool overlap() const;
  const GradSyncStats& stats() const;
  // Bucket b's parameter indexes (into `params`), in the order the bucket holds them.
  std::vector<std::vector<size_t>> bucket_layout() const;

  struct State;

 private:
  std::shared_ptr<State> st_;
};

}  // namespace lm::train
