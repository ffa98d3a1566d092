// A CUDA graph of one training step's device work (train.hardware.cuda_graphs, issue 22 item 5):
// captured once, then replayed each step with no kernel launches from the host. What a replay
// reads must sit at fixed addresses: the batch in static buffers the trainer copies into, the
// learning rate in a device tensor (AdamW::set_lr) written before each replay, the step count
// already on the device. docs/performance.md, "CUDA graphs".
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

namespace lm::train {

class StepGraph {
 public:
  // True when this build can capture graphs (LibTorch with CUDA).
  static bool supported();

  explicit StepGraph(torch::Device device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // On a side stream: runs body(false) for real (this step, and the side stream's warm-up), then
  // before_capture() (e.g. drop the gradients, so the captured backward allocates them in the
  // graph's pool, as torch.cuda.graph's whole-network recipe does), waits for the device, empties
  // the cache and captures body(true) (recorded, not run). The current stream waits for the side
  // stream afterwards. A capture error throws (c10::Error) and leaves no graph.
  void run_then_capture(const std::function<void(bool capturing)>& body,
                        const std::function<void()>& before_capture);
  // Replays the captured step on the current stream.
  void replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lm::train
