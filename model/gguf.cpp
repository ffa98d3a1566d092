#include "model/gguf.h"

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/file.h"

namespace lm::model {
namespace {

template <class T>
void put(std::string& out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as GGUF is
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

uint16_t fp16_bits(float x) { return c10::Half(x).x; }  // round to nearest even, as ggml's F16C path
float fp16_value(uint16_t bits) { return static_cast<float>(c10::Half(bits, c10::Half::from_bits())); }

void pad_to(std::string& out, uint64_t alignment) {
  out.append((alignment - out.size() % alignment) % alignment, '\0');
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "f32";
    case GgmlType::kF16: return "f16";
    case GgmlType::kQ8_0: return "q8_0";
  }
  return "?";
}

int64_t ggml_type_bytes(GgmlType t, int64_t n) {
  switch (t) {
    case GgmlType::kF32: return 4 * n;
    case GgmlType::kF16: return 2 * n;
    case GgmlType::kQ8_0: return n / kQ8_0BlockSize * kQ8_0BlockBytes;
  }
  return 0;
}

std::string quantize_q8_0(const float* x, int64_t n) {
  TORCH_CHECK(n % kQ8_0BlockSize == 0, "quantize_q8_0: ", n, " values is not a multiple of ", kQ8_0BlockSize);
  std::string out;
  out.reserve(n / kQ8_0BlockSize * kQ8_0BlockBytes);
  for (int64_t b = 0; b < n; b += kQ8_0BlockSize) {
    float amax = 0.0f;
    for (int64_t j = 0; j < kQ8_0BlockSize; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put<uint16_t>(out, fp16_bits(d));
    for (int64_t j = 0; j < kQ8_0BlockSize; ++j) out.push_back(static_cast<char>(static_cast<int8_t>(std::roundf(x[b + j] * id))));
  }
  return out;
}

std::vector<float> dequantize_q8_0(const std::string& blocks) {
  TORCH_CHECK(blocks.size() % kQ8_0BlockBytes == 0, "dequantize_q8_0: ", blocks.size(), " bytes is not whole blocks");
  std::vector<float> out;
  for (size_t b = 0; b < blocks.size(); b += kQ8_0BlockBytes) {
    uint16_t bits;
    std::memcpy(&bits, blocks.data() + b, 2);
    const float d = fp16_value(bits);
    for (int64_t j = 0; j < kQ8_0BlockSize; ++j) out.push_back(d * static_cast<int8_t>(blocks[b + 2 + j]));
  }
  return out;
}

void GgufWriter::begin_kv(const std::string& key, GgufValueType type) {
  TORCH_CHECK(keys_.insert(key).second, "GgufWriter: metadata key ", key, " written twice");
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
  ++n_kv_;
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) { begin_kv(key, GgufValueType::kUint32); put(kv_, v); }
void GgufWriter::add_i32(const std::string& key, int32_t v) { begin_kv(key, GgufValueType::kInt32); put(kv_, v); }
void GgufWriter::add_f32(const std::string& key, float v) { begin_kv(key, GgufValueType::kFloat32); put(kv_, v); }
void GgufWriter::add_bool(const std::string& key, bool v) { begin_kv(key, GgufValueType::kBool); put<uint8_t>(kv_, v ? 1 : 0); }
void GgufWriter::add_string(const std::string& key, const std::string& v) {
  begin_kv(key, GgufValueType::kString);
  put_string(kv_, v);
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  begin_kv(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kString));
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_string(kv_, s);
}

void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  begin_kv(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kFloat32));
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}

void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  begin_kv(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kInt32));
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

void GgufWriter::add_u8_array(const std::string& key, const std::string& bytes) {
  begin_kv(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kUint8));
  put<uint64_t>(kv_, bytes.size());
  kv_ += bytes;
}

absl::Status GgufWriter::add_tensor(const std::string& name, const torch::Tensor& t, GgmlType type) {
  if (name.size() >= 64)  // GGML_MAX_NAME, including the terminating NUL
    return absl::InvalidArgumentError(absl::StrCat("gguf tensor name '", name, "' is longer than 63 bytes"));
  if (t.dim() < 1 || t.dim() > 4)
    return absl::InvalidArgumentError(absl::StrCat("gguf tensor ", name, ": ", t.dim(), " dimensions (1 to 4 allowed)"));
  Tensor g{name, {}, type, {}};
  for (int64_t d = t.dim() - 1; d >= 0; --d) g.ne.push_back(t.size(d));
  const auto f32 = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  switch (type) {
    case GgmlType::kF32:
      g.data.assign(static_cast<const char*>(f32.data_ptr()), f32.numel() * 4);
      break;
    case GgmlType::kF16: {
      const auto h = f32.to(torch::kFloat16).contiguous();
      g.data.assign(static_cast<const char*>(h.data_ptr()), h.numel() * 2);
      break;
    }
    case GgmlType::kQ8_0:
      if (g.ne[0] % kQ8_0BlockSize != 0)
        return absl::InvalidArgumentError(absl::StrCat("gguf tensor ", name, ": rows of ", g.ne[0],
                                                       " values cannot be split into Q8_0 blocks of 32"));
      g.data = quantize_q8_0(f32.data_ptr<float>(), f32.numel());
      break;
  }
  tensors_.push_back(std::move(g));
  return absl::OkStatus();
}

std::string GgufWriter::encode() const {
  std::string out;
  out += "GGUF";
  put<uint32_t>(out, kGgufVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out += kv_;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<uint64_t>(out, static_cast<uint64_t>(n));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (t.data.size() + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment;
  }
  pad_to(out, kGgufAlignment);
  for (const auto& t : tensors_) {
    out += t.data;
    pad_to(out, kGgufAlignment);
  }
  return out;
}

absl::Status GgufWriter::write(const std::string& path) const { return write_file_atomic(path, encode()); }

}  // namespace lm::model
