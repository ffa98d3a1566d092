#include "train/step_graph.h"

#if defined(LM_HAVE_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lm::train {

#if defined(LM_HAVE_CUDA)

struct StepGraph::Impl {
  explicit Impl(torch::Device d) : device(d) {}
  torch::Device device;
  at::cuda::CUDAGraph graph;
  bool captured = false;
};

bool StepGraph::supported() { return true; }

StepGraph::StepGraph(torch::Device device) : impl_(std::make_unique<Impl>(device)) {
  TORCH_CHECK(device.is_cuda(), "CUDA graphs need a CUDA device, got ", device.str());
}

StepGraph::~StepGraph() = default;

void StepGraph::run_then_capture(const std::function<void(bool capturing)>& body,
                                 const std::function<void()>& before_capture) {
  const c10::cuda::CUDAGuard device_guard(impl_->device);
  auto current = c10::cuda::getCurrentCUDAStream(impl_->device.index());
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, impl_->device.index());
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);
  {
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    body(false);
    if (before_capture) before_capture();
    // As torch.cuda.graph does: nothing in flight and the cache emptied before the capture, so
    // the graph's private pool starts clean.
    torch::cuda::synchronize(impl_->device.index());
    c10::cuda::CUDACachingAllocator::emptyCache();
    impl_->graph.capture_begin();
    try {
      body(true);
    } catch (...) {
      try {
        impl_->graph.capture_end();
      } catch (...) {
      }
      impl_->graph.reset();
      throw;
    }
    impl_->graph.capture_end();
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
  impl_->captured = true;
}

void StepGraph::replay() {
  TORCH_CHECK(impl_->captured, "StepGraph::replay before a capture");
  const c10::cuda::CUDAGuard device_guard(impl_->device);
  impl_->graph.replay();
}

bool StepGraph::captured() const { return impl_->captured; }

#else  // LibTorch without CUDA

struct StepGraph::Impl {};
bool StepGraph::supported() { return false; }
StepGraph::StepGraph(torch::Device) { TORCH_CHECK(false, "CUDA graphs: this LibTorch has no CUDA"); }
StepGraph::~StepGraph() = default;
void StepGraph::run_then_capture(const std::function<void(bool)>&, const std::function<void()>&) {
  TORCH_CHECK(false, "no CUDA");
}
void StepGraph::replay() { TORCH_CHECK(false, "no CUDA"); }
bool StepGraph::captured() const { return false; }

#endif

}  // namespace lm::train
