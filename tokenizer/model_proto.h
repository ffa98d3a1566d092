// SentencePiece's ModelProto read and written in the protobuf wire format by hand
// (https://protobuf.dev/programming-guides/encoding/; field numbers from sentencepiece_model.proto):
// Debian ships no sentencepiece_model.pb.h, and SentencePiece's private protobuf must stay inside
// liblm_spm.so (spm_bridge.h). Used to drop the training-place fields from the identity hash
// (portable_model_bytes) and to merge per-language unigram models (merge.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace lm::tokenizer {
namespace wire {

bool read_varint(std::string_view b, size_t& i, uint64_t* v);
void write_varint(uint64_t v, std::string* out);

// Calls fn(field, wire_type, raw, payload) for each field of message `b`: raw is the whole field
// (tag included), payload the bytes of a length-delimited field (else empty). False when `b` is
// not well-formed.
template <class Fn>
bool for_each_field(std::string_view b, Fn fn) {
  for (size_t i = 0; i < b.size();) {
    const size_t start = i;
    uint64_t tag = 0, v = 0;
    if (!read_varint(b, i, &tag)) return false;
    const int field = static_cast<int>(tag >> 3), type = static_cast<int>(tag & 7);
    std::string_view payload;
    if (type == 0) {
      if (!read_varint(b, i, &v)) return false;
    } else if (type == 1 || type == 5) {
      i += type == 1 ? 8 : 4;
    } else if (type == 2) {
      if (!read_varint(b, i, &v) || v > b.size() - i) return false;
      payload = b.substr(i, v);
      i += v;
    } else {
      return false;  // groups: not in sentencepiece_model.proto
    }
    if (i > b.size()) return false;
    fn(field, type, b.substr(start, i - start), payload);
  }
  return true;
}

// Copies the message `b` without the fields in `drop`; `edit(field, bytes)` may rewrite a
// length-delimited field. False when `b` is not well-formed.
template <class Edit>
bool filter_message(std::string_view b, const std::set<int>& drop, Edit edit, std::string* out) {
  return for_each_field(b, [&](int field, int type, std::string_view raw, std::string_view payload) {
    if (drop.count(field)) return;
    std::string p(payload);
    if (type == 2 && edit(field, &p)) {
      write_varint((static_cast<uint64_t>(field) << 3) | 2, out);
      write_varint(p.size(), out);
      out->append(p);
    } else {
      out->append(raw);
    }
  });
}

}  // namespace wire

// ModelProto.SentencePiece: type 1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE.
struct ModelPiece {
  std::string piece;
  float score = 0;
  int32_t type = 1;
};
inline constexpr int32_t kNormalPiece = 1;

// A model as its pieces plus every other top-level field (trainer and normalizer specs, ...) as
// wire bytes, in their order.
struct ModelParts {
  std::vector<ModelPiece> pieces;
  std::string other;
};
bool parse_model_parts(std::string_view bytes, ModelParts* out);
// The model bytes, with trainer_spec.vocab_size set to the number of pieces and no
// self_test_data (its expected encodings belong to the model it came from).
std::string serialize_model_parts(const ModelParts& m);

}  // namespace lm::tokenizer
