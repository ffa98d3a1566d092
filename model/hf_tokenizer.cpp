#include "model/hf_tokenizer.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lm::model {
namespace {

// A protobuf wire-format reader, enough for sentencepiece_model.proto's scalars, strings and
// sub-messages (https://protobuf.dev/programming-guides/encoding/).
struct Reader {
  const std::string& buf;
  size_t pos, end;
  bool ok = true;
  bool done() const { return !ok || pos >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && pos < end; shift += 7) {
      const auto b = static_cast<uint8_t>(buf[pos++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  // Reads a tag; for length-delimited fields sets [sub_begin, sub_end).
  bool next(int& field, int& wire, size_t& sub_begin, size_t& sub_end, uint64_t& value) {
    const uint64_t tag = varint();
    field = static_cast<int>(tag >> 3);
    wire = static_cast<int>(tag & 7);
    switch (wire) {
      case 0: value = varint(); break;
      case 1: pos += 8; break;
      case 2: {
        const uint64_t n = varint();
        sub_begin = pos;
        sub_end = pos + n;
        if (sub_end > end) ok = false;
        pos = sub_end;
        break;
      }
      case 5:
        if (pos + 4 > end) { ok = false; break; }
        value = 0;
        std::memcpy(&value, buf.data() + pos, 4);
        pos += 4;
        break;
      default: ok = false;
    }
    return ok;
  }
};

struct Piece {
  std::string text;
  float score = 0;
  int type = 1;  // NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
};

struct SpmModel {
  std::vector<Piece> pieces;
  int model_type = 1;  // UNIGRAM 1, BPE 2
  int64_t unk_id = 0;
  bool byte_fallback = false;
  std::string charsmap;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

bool parse(const std::string& b, SpmModel& m) {
  Reader r{b, 0, b.size()};
  int f, w;
  size_t s0 = 0, s1 = 0;
  uint64_t v = 0;
  while (!r.done() && r.next(f, w, s0, s1, v)) {
    if (w != 2 || f < 1 || f > 3) continue;
    Reader sub{b, s0, s1};
    if (f == 1) {  // SentencePiece { piece 1, score 2, type 3 }
      Piece p;
      while (!sub.done() && sub.next(f, w, s0, s1, v)) {
        if (f == 1 && w == 2) p.text = b.substr(s0, s1 - s0);
        if (f == 2 && w == 5) { uint32_t u = static_cast<uint32_t>(v); std::memcpy(&p.score, &u, 4); }
        if (f == 3 && w == 0) p.type = static_cast<int>(v);
      }
      m.pieces.push_back(std::move(p));
    } else if (f == 2) {  // TrainerSpec { model_type 3, byte_fallback 35, unk_id 40 }
      while (!sub.done() && sub.next(f, w, s0, s1, v)) {
        if (f == 3 && w == 0) m.model_type = static_cast<int>(v);
        if (f == 35 && w == 0) m.byte_fallback = v != 0;
        if (f == 40 && w == 0) m.unk_id = static_cast<int64_t>(v);
      }
    } else {  // NormalizerSpec { precompiled_charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5 }
      while (!sub.done() && sub.next(f, w, s0, s1, v)) {
        if (f == 2 && w == 2) m.charsmap = b.substr(s0, s1 - s0);
        if (f == 3 && w == 0) m.add_dummy_prefix = v != 0;
        if (f == 4 && w == 0) m.remove_extra_whitespaces = v != 0;
        if (f == 5 && w == 0) m.escape_whitespaces = v != 0;
      }
    }
    if (!sub.ok) return false;
  }
  return r.ok;
}

Json replace(const char* kind, const std::string& pattern, const std::string& content) {
  return Json{{"type", "Replace"}, {"pattern", Json{{kind, pattern}}}, {"content", content}};
}

}  // namespace

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += {k[n >> 18], k[(n >> 12) & 63], k[(n >> 6) & 63], k[n & 63]};
  }
  if (i + 1 == bytes.size()) {
    const uint32_t n = uint8_t(bytes[i]) << 16;
    out += {k[n >> 18], k[(n >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {k[n >> 18], k[(n >> 12) & 63], k[(n >> 6) & 63], '='};
  }
  return out;
}

absl::StatusOr<Json> hf_tokenizer_json(const std::string& spm_model, const SpecialTokens& sp,
                                       const std::string& source) {
  SpmModel m;
  if (!parse(spm_model, m) || m.pieces.empty())
    return absl::DataLossError(absl::StrCat(source, ": not a SentencePiece model (protobuf parse failed)"));
  if (m.model_type != 1)
    return absl::UnimplementedError(absl::StrCat(source, ": model_type ", m.model_type,
                                                 " is not unigram; tokenizer.json is written for unigram only"));
  Json vocab = Json::array(), added = Json::array();
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const Piece& p = m.pieces[i];
    if (p.type == 4)
      return absl::UnimplementedError(absl::StrCat(source, ": user-defined piece '", p.text,
                                                   "' (tokenizer.json would need a Split pre-tokenizer)"));
    vocab.push_back(Json::array({p.text, static_cast<double>(p.score)}));
    if (p.type == 2 || p.type == 3)
      added.push_back(Json{{"id", i}, {"content", p.text}, {"single_word", false}, {"lstrip", false},
                           {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  // Normalizer in SentencePiece's order (charsmap, whitespace removal, escaping).
  Json norms = Json::array();
  if (!m.charsmap.empty()) norms.push_back(Json{{"type", "Precompiled"}, {"precompiled_charsmap", base64(m.charsmap)}});
  if (m.remove_extra_whitespaces) {
    norms.push_back(replace("Regex", "\\A +| +\\z", ""));
    norms.push_back(replace("Regex", " {2,}", " "));
  }
  if (m.escape_whitespaces) norms.push_back(replace("String", " ", "\u2581"));
  Json pre = nullptr;
  if (m.add_dummy_prefix)
    pre = Json{{"type", "Sequence"},
               {"pretokenizers", Json::array({Json{{"type", "Metaspace"}, {"replacement", "\u2581"},
                                                   {"prepend_scheme", "first"}, {"split", false}}})}};
  Json decoders = Json::array({replace("String", "\u2581", " ")});
  if (m.byte_fallback) decoders.push_back(Json{{"type", "ByteFallback"}});
  if (m.add_dummy_prefix || m.byte_fallback) decoders.push_back(Json{{"type", "Fuse"}});
  if (m.add_dummy_prefix) decoders.push_back(Json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  // bos + text when the framing has BOS, as training stores documents (and as tokenizer_config's
  // add_bos_token says); otherwise no post-processor: the text alone.
  const Json bos = Json{{"SpecialToken", Json{{"id", sp.bos}, {"type_id", 0}}}};
  auto seq = [](const char* id) { return Json{{"Sequence", Json{{"id", id}, {"type_id", 0}}}}; };
  Json post = {{"type", "TemplateProcessing"},
               {"single", Json::array({bos, seq("A")})},
               {"pair", Json::array({bos, seq("A"), bos, seq("B")})},
               {"special_tokens", Json{{sp.bos, Json{{"id", sp.bos}, {"ids", {sp.bos_id}}, {"tokens", {sp.bos}}}}}}};
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", Json{{"type", "Sequence"}, {"normalizers", norms}}},
              {"pre_tokenizer", pre},
              {"post_processor", sp.add_bos ? post : Json(nullptr)},
              {"decoder", Json{{"type", "Sequence"}, {"decoders", decoders}}},
              {"model", Json{{"type", "Unigram"}, {"unk_id", m.unk_id}, {"vocab", vocab}, {"byte_fallback", m.byte_fallback}}}};
}

}  // namespace lm::model
