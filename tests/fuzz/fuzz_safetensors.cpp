// libFuzzer target: the safetensors reader (model/safetensors.cpp, decode_safetensors) on
// arbitrary bytes, in memory (load_safetensors only mmaps the file and calls it).
// An accepted file is encoded again and decoded again: the round trip must succeed and give
// the same names, shapes and bytes, or the harness aborts (a finding like any crash).
#include <cstdlib>
#include <cstring>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = lm::model::decode_safetensors(std::string_view(reinterpret_cast<const char*>(data), size),
                                         "fuzz.safetensors");
  if (!f.ok()) return 0;
  const std::string again = lm::model::encode_safetensors(f->tensors, f->metadata);
  auto g = lm::model::decode_safetensors(again, "fuzz.safetensors(re-encoded)");
  if (!g.ok() || g->tensors.size() != f->tensors.size() || g->metadata != f->metadata) std::abort();
  for (size_t i = 0; i < f->tensors.size(); ++i) {
    const auto& a = f->tensors[i].second;
    const auto& b = g->tensors[i].second;
    if (f->tensors[i].first != g->tensors[i].first || a.sizes() != b.sizes() ||
        a.scalar_type() != b.scalar_type() ||
        (a.numel() > 0 && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) != 0))
      std::abort();
  }
  return 0;
}
