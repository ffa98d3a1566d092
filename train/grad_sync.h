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
  ~GradSync();  // removes the hooks
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Call before each backward: `sync` is true only for the last micro-batch of a step; the others
  // accumulate locally (DDP's no_sync), so one all-reduce per step carries the summed gradient.
  void before_backward(bool sync);
  // After the last backward: starts what is not started yet, waits for every bucket, writes
  // sum/world back into each .grad. After it returns the gradients are final (clip, step).
  void finish();

  bool overlap() const;
  const GradSyncStats& stats() const;
  // Bucket b's parameter indexes (into `params`), in the order the bucket holds them.
  std::vector<std::vector<size_t>> bucket_layout() const;

  struct State;

 private:
  std::shared_ptr<State> st_;
};

}  // namespace lm::train
