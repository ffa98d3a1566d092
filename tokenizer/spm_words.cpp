#include "tokenizer/spm_words.h"

#include <absl/container/flat_hash_map.h>

#include <atomic>

#include "tokenizer/model_proto.h"

namespace lm::tokenizer {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space
constexpr size_t kCachedPieceBytes = 256;
constexpr size_t kCacheEntries = 1 << 16;

struct Specs {
  bool ok = true;  // a model this class encodes exactly
  bool dummy_prefix = true;
};

// Reads the normalizer and trainer specs (proto2 defaults when a field is absent).
Specs read_specs(const std::string& bytes) {
  Specs s;
  bool bpe = false;
  const bool parsed = wire::for_each_field(bytes, [&](int field, int, std::string_view, std::string_view payload) {
    if (field == 2) {  // trainer_spec: model_type 3 (BPE = 2), treat_whitespace_as_suffix 24
      wire::for_each_field(payload, [&](int f, int, std::string_view raw, std::string_view) {
        size_t i = 0;
        uint64_t tag = 0, v = 0;
        if (f != 3 && f != 24) return;
        wire::read_varint(raw, i, &tag);
        wire::read_varint(raw, i, &v);
        if (f == 3) bpe = v == 2;
        if (f == 24 && v != 0) s.ok = false;
      });
    } else if (field == 3) {  // normalizer_spec: charsmap 2, add_dummy_prefix 3, remove_extra_ws 4, escape 5
      bool remove_ws = true, escape = true;
      wire::for_each_field(payload, [&](int f, int, std::string_view raw, std::string_view p) {
        size_t i = 0;
        uint64_t tag = 0, v = 0;
        if (f == 2 && !p.empty()) s.ok = false;
        if (f < 3 || f > 5) return;
        wire::read_varint(raw, i, &tag);
        wire::read_varint(raw, i, &v);
        (f == 3 ? s.dummy_prefix : f == 4 ? remove_ws : escape) = v != 0;
      });
      if (remove_ws || !escape) s.ok = false;
    }
  });
  s.ok = s.ok && parsed && bpe;
  return s;
}

// No piece with "▁" after another character, and no user-defined symbols.
bool pieces_allow_cuts(const std::string& bytes) {
  ModelParts parts;
  if (!parse_model_parts(bytes, &parts)) return false;
  for (const ModelPiece& p : parts.pieces) {
    if (p.type == 4) return false;
    for (size_t at = p.piece.find(kSpace, 1); at != std::string::npos; at = p.piece.find(kSpace, at + 1))
      if (p.piece.compare(at - kSpace.size(), kSpace.size(), kSpace) != 0) return false;
  }
  return true;
}

// The model with its normalizer doing nothing: the pieces come escaped already.
std::string raw_model(const std::string& bytes) {
  std::string out;
  wire::filter_message(bytes, {}, [](int field, std::string* p) {
    if (field != 3) return false;
    std::string spec;
    wire::filter_message(*p, {3, 4, 5}, [](int, std::string*) { return false; }, &spec);
    for (int f : {3, 4, 5}) {
      wire::write_varint(static_cast<uint64_t>(f) << 3, &spec);
      wire::write_varint(0, &spec);
    }
    *p = spec;
    return true;
  }, &out);
  return out;
}

struct PieceCache {
  uint64_t tag = 0;
  absl::flat_hash_map<std::string, std::vector<int32_t>> map;
};

}  // namespace

std::shared_ptr<const SpmWords> SpmWords::make(const std::string& model_bytes) {
  const Specs s = read_specs(model_bytes);
  if (!s.ok || !pieces_allow_cuts(model_bytes)) return nullptr;
  std::string error;
  auto raw = bridge::load_model(raw_model(model_bytes), &error);
  if (!raw) return nullptr;
  static std::atomic<uint64_t> tags{1};
  auto w = std::make_shared<SpmWords>();
  w->raw_ = std::move(raw);
  w->dummy_prefix_ = s.dummy_prefix;
  w->cache_tag_ = tags.fetch_add(1);
  return w;
}

void SpmWords::encode_piece(std::string_view piece, std::vector<int32_t>* ids) const {
  thread_local PieceCache cache;
  if (piece.size() > kCachedPieceBytes) {
    std::vector<int32_t> out;
    bridge::encode(*raw_, piece, &out);
    ids->insert(ids->end(), out.begin(), out.end());
    return;
  }
  if (cache.tag != cache_tag_) cache.map.clear(), cache.tag = cache_tag_;
  auto it = cache.map.find(absl::string_view(piece.data(), piece.size()));
  if (it == cache.map.end()) {
    if (cache.map.size() >= kCacheEntries) cache.map.clear();
    std::vector<int32_t> out;
    bridge::encode(*raw_, piece, &out);
    it = cache.map.emplace(std::string(piece), std::move(out)).first;
  }
  ids->insert(ids->end(), it->second.begin(), it->second.end());
}

void SpmWords::encode(std::string_view text, std::vector<int32_t>* ids) const {
  ids->clear();
  thread_local std::string escaped;
  for_each_word(text, dummy_prefix_, &escaped, [&](std::string_view w) { encode_piece(w, ids); });
}

}  // namespace lm::tokenizer
