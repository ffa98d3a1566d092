// safetensors read/write (https://github.com/huggingface/safetensors): 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then the raw little-endian tensor bytes.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/status.h"

namespace lm::model {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // in file order, on CPU
  std::map<std::string, std::string> metadata;
};

// The header's dtype name of `t` ("BF16", "F32", ...); nullptr for a type safetensors lacks here.
const char* safetensors_dtype_name(torch::ScalarType t);

// Serialises to bytes (tensors are moved to CPU and made contiguous).
std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});
// Writes atomically.
absl::Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Parses and validates every header field; errors name the file, the tensor and the field.
absl::StatusOr<SafetensorsFile> decode_safetensors(std::string_view bytes, const std::string& source);
absl::StatusOr<SafetensorsFile> load_safetensors(const std::string& path);

// One tensor's place in a safetensors file, as its (validated) header gives it.
struct SafetensorsEntry {
  std::string name;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section (after the header)
};

// A safetensors file mapped read-only: the header is parsed and checked as decode_safetensors
// does, the tensor bytes stay in the page cache until a caller copies one (HF import copies each
// straight into its model parameter, so a checkpoint never sits in RAM twice).
class MappedSafetensors {
 public:
  static absl::StatusOr<MappedSafetensors> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // A CPU tensor over the mapped bytes of `e`: no copy where the bytes are aligned for the dtype
  // (a copy otherwise). Read-only and valid while this object lives: copy_ out of it.
  torch::Tensor view(const SafetensorsEntry& e) const;
  // Drops the pages of `e` from this process's resident set (they are re-read if viewed again).
  void release(const SafetensorsEntry& e) const;

 private:
  MappedFile file_;
  std::string path_;
  int64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;  // sorted by name
  std::map<std::string, std::string> metadata_;
};

// Parameters and buffers of a module, by registered name.
NamedTensors module_state(const torch::nn::Module& module);

// Copies tensors into a module's parameters/buffers. Every name must exist on both sides and
// shapes must match; dtype must match unless `allow_dtype_cast` (e.g. bf16 export into fp32).
absl::Status load_module_state(torch::nn::Module& module, const SafetensorsFile& file,
                               const std::string& source, bool allow_dtype_cast = false);

}  // namespace lm::model
