// GGUF writer: llama.cpp's single-file model format (ggml docs/gguf.md, version 3).
//
// File layout, all little-endian:
//   "GGUF"  u32 version (3)  u64 tensor_count  u64 metadata_kv_count
//   metadata: {string key, u32 value_type, value}...      string = u64 length + UTF-8 bytes
//   tensor infos: {string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset}...
//   zero padding to general.alignment (32), then the tensor data, each tensor starting at
//   `offset` (relative to the data section, a multiple of the alignment).
// ne[] is ggml's order, fastest-varying first: a torch [out, in] Linear weight is ne = {in, out}.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::model {

inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint64_t kGgufAlignment = 32;  // the spec's default general.alignment
inline constexpr int64_t kQ8_0BlockSize = 32;   // values per Q8_0 block (ggml block_q8_0)
inline constexpr int64_t kQ8_0BlockBytes = 34;  // fp16 scale + 32 int8

// gguf_metadata_value_type
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// ggml_type values of the tensor types lmforge writes.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8 };
const char* ggml_type_name(GgmlType t);
// Bytes of `n` values of type `t` (n a multiple of 32 for Q8_0).
int64_t ggml_type_bytes(GgmlType t, int64_t n);

// ggml's quantize_row_q8_0_ref: per block of 32, d = max|x| / 127, q = roundf(x / d) (half away
// from zero, computed as x * (1/d) in fp32), d stored as fp16. `n` must be a multiple of 32.
std::string quantize_q8_0(const float* x, int64_t n);
// The inverse, for tests: x = d * q.
std::vector<float> dequantize_q8_0(const std::string& blocks);

class GgufWriter {
 public:
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_u8_array(const std::string& key, const std::string& bytes);

  // Stores `t` (any float dtype, any device) converted to `type`. Q8_0 needs the last dimension
  // (ggml's ne[0], the row) to be a multiple of 32; InvalidArgument otherwise.
  absl::Status add_tensor(const std::string& name, const torch::Tensor& t, GgmlType type);

  std::string encode() const;
  // write_file_atomic (temp + fsync + rename).
  absl::Status write(const std::string& path) const;

  size_t tensor_count() const { return tensors_.size(); }

 private:
  void begin_kv(const std::string& key, GgufValueType type);
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::string data;
  };
  std::string kv_;
  uint64_t n_kv_ = 0;
  std::set<std::string> keys_;
  std::vector<Tensor> tensors_;
};

}  // namespace lm::model
