// Anchor for the shared precompiled <torch/torch.h>; see CMakeLists.txt.
#include <torch/torch.h>
