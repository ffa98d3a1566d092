#include "model/autocast.h"

#include <ATen/autocast_mode.h>

namespace lm::model {

AutocastGuard::AutocastGuard(const torch::Device& device, bool enabled)
    : enabled_(enabled), cuda_(device.is_cuda()) {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(cuda_ ? at::kCUDA : at::kCPU, true);
  at::autocast::set_autocast_dtype(cuda_ ? at::kCUDA : at::kCPU, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(cuda_ ? at::kCUDA : at::kCPU, false);
  at::autocast::clear_cache();
}

}  // namespace lm::model
