// safetensors read/write (https://github.com/huggingface/safetensors): 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then the raw little-endian tensor bytes.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace lm::model {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // in file order, on CPU
  std::map<std::string, std::string> metadata;
};

// Serialises to bytes (tensors are moved to CPU and made contiguous).
std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});
// Writes atomically.
absl::Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Parses and validates every header field; errors name the file, the tensor and the field.
absl::StatusOr<SafetensorsFile> decode_safetensors(std::string_view bytes, const std::string& source);
absl::StatusOr<SafetensorsFile> load_safetensors(const std::string& path);

// Parameters and buffers of a module, by registered name.
NamedTensors module_state(const torch::nn::Module& module);

// Copies tensors into a module's parameters/buffers. Every name must exist on both sides and
// shapes must match; dtype must match unless `allow_dtype_cast` (e.g. bf16 export into fp32).
absl::Status load_module_state(torch::nn::Module& module, const SafetensorsFile& file,
                               const std::string& source, bool allow_dtype_cast = false);

}  // namespace lm::model
