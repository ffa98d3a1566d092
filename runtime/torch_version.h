// The one place that reads LibTorch's version macros (the build needs LibTorch >= 2.6, checked
// by CMake; there are no version branches in the code).
#pragma once

#include <torch/version.h>

namespace lm {
inline constexpr const char* kTorchVersion = TORCH_VERSION;
}  // namespace lm
