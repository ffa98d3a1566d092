#include "tokenizer/model_proto.h"

#include <cstring>

namespace lm::tokenizer {
namespace wire {

bool read_varint(std::string_view b, size_t& i, uint64_t* v) {
  *v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[i++]);
    *v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

void write_varint(uint64_t v, std::string* out) {
  do {
    uint8_t c = v & 0x7f;
    v >>= 7;
    out->push_back(static_cast<char>(v ? c | 0x80 : c));
  } while (v);
}

}  // namespace wire

namespace {

constexpr int kPieces = 1, kTrainerSpec = 2, kSelfTestData = 4;
constexpr int kPieceText = 1, kPieceScore = 2, kPieceType = 3, kTrainerVocabSize = 4;

bool parse_piece(std::string_view b, ModelPiece* p) {
  bool ok = true;
  const bool well_formed = wire::for_each_field(b, [&](int field, int type, std::string_view raw, std::string_view payload) {
    if (field == kPieceText && type == 2) {
      p->piece = std::string(payload);
    } else if (field == kPieceScore && type == 5) {
      std::memcpy(&p->score, raw.data() + raw.size() - 4, 4);  // little-endian float, as on x86/ARM
    } else if (field == kPieceType && type == 0) {
      size_t i = 1;  // after the one-byte tag
      uint64_t v = 0;
      ok = wire::read_varint(raw, i, &v);
      p->type = static_cast<int32_t>(v);
    }
  });
  return well_formed && ok;
}

void append_field(int field, const std::string& payload, std::string* out) {
  wire::write_varint((static_cast<uint64_t>(field) << 3) | 2, out);
  wire::write_varint(payload.size(), out);
  out->append(payload);
}

}  // namespace

bool parse_model_parts(std::string_view bytes, ModelParts* out) {
  bool ok = true;
  const bool well_formed = wire::for_each_field(bytes, [&](int field, int, std::string_view raw, std::string_view payload) {
    if (field != kPieces) {
      out->other.append(raw);
      return;
    }
    ModelPiece p;
    ok = ok && parse_piece(payload, &p);
    out->pieces.push_back(std::move(p));
  });
  return well_formed && ok && !out->pieces.empty();
}

std::string serialize_model_parts(const ModelParts& m) {
  std::string out;
  for (const ModelPiece& p : m.pieces) {
    std::string b;
    append_field(kPieceText, p.piece, &b);
    wire::write_varint((kPieceScore << 3) | 5, &b);
    char f[4];
    std::memcpy(f, &p.score, 4);
    b.append(f, 4);
    if (p.type != kNormalPiece) {
      wire::write_varint(kPieceType << 3, &b);
      wire::write_varint(static_cast<uint64_t>(p.type), &b);
    }
    append_field(kPieces, b, &out);
  }
  auto edit = [&](int field, std::string* payload) {
    if (field != kTrainerSpec) return false;
    std::string spec;
    wire::filter_message(*payload, {kTrainerVocabSize}, [](int, std::string*) { return false; }, &spec);
    wire::write_varint(kTrainerVocabSize << 3, &spec);
    wire::write_varint(m.pieces.size(), &spec);
    *payload = std::move(spec);
    return true;
  };
  wire::filter_message(m.other, {kSelfTestData}, edit, &out);
  return out;
}

}  // namespace lm::tokenizer
