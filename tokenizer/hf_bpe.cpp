#include "tokenizer/hf_bpe.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <queue>

#include "corpus/corpus.h"

namespace lm::tokenizer {

const std::array<char32_t, 256>& byte_to_unicode() {
  // GPT-2's bytes_to_unicode(): '!'..'~', '¡'..'¬', '®'..'ÿ' map to themselves, the rest in order
  // to 256, 257, ...
  static const std::array<char32_t, 256> map = [] {
    std::array<char32_t, 256> m{};
    std::array<bool, 256> kept{};
    for (int b = '!'; b <= '~'; ++b) kept[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) kept[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) kept[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) m[b] = kept[b] ? static_cast<char32_t>(b) : next++;
    return m;
  }();
  return map;
}

namespace {

// Per-thread memo of pieces already encoded (HF keeps one too): most words of running text repeat.
struct PieceCache {
  uint64_t tag = 0;
  absl::flat_hash_map<std::string, std::vector<int32_t>> map;
};
constexpr size_t kCacheEntries = 1 << 16;  // cleared when full: bounded memory per thread
constexpr size_t kCachedPieceBytes = 64;   // longer pieces are rare and not memoised

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// NFC of `text` (ICU); `text` itself when it is already normalized (the usual case).
std::string_view nfc(std::string_view text, std::string& buf) {
  if (is_ascii(text)) return text;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  if (U_FAILURE(status) || n->isNormalized(u, status)) return text;
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = n->normalize(u, status);
  if (U_FAILURE(status)) return text;
  buf.clear();
  out.toUTF8String(buf);
  return buf;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

void HfBpe::merge_symbols(std::vector<int32_t>& sym) const {
  // Lowest rank first, leftmost among equals: HF's Word::merge_all, with a heap and a linked list
  // so that a long piece (a run of spaces) stays O(n log n).
  const int n = static_cast<int>(sym.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Item {
    int32_t rank, pos, id;
    bool operator>(const Item& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(sym[pos], sym[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Item top = heap.top();
    heap.pop();
    if (dead[top.pos] || next[top.pos] < 0) continue;
    const int right = next[top.pos];
    auto it = merges_.find(pair_key(sym[top.pos], sym[right]));
    if (it == merges_.end() || it->second.id != top.id) continue;  // stale: a neighbour changed
    sym[top.pos] = top.id;
    dead[right] = true;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push(prev[top.pos]);
    push(top.pos);
  }
  int w = 0;
  for (int i = 0; i < n; ++i)
    if (!dead[i]) sym[w++] = sym[i];
  sym.resize(w);
}

void HfBpe::encode_piece(std::string_view bytes, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(absl::string_view(bytes.data(), bytes.size())); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  thread_local PieceCache cache;
  const bool cacheable = bytes.size() <= kCachedPieceBytes;
  if (cacheable) {
    if (cache.tag != cache_tag_) cache.map.clear(), cache.tag = cache_tag_;
    if (auto it = cache.map.find(absl::string_view(bytes.data(), bytes.size())); it != cache.map.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> sym;
  sym.reserve(bytes.size());
  for (unsigned char b : bytes)
    if (byte_id_[b] >= 0) sym.push_back(byte_id_[b]);  // a byte outside the vocabulary is dropped, as HF does
  merge_symbols(sym);
  ids->insert(ids->end(), sym.begin(), sym.end());
  if (cacheable) {
    if (cache.map.size() >= kCacheEntries) cache.map.clear();
    cache.map.emplace(std::string(bytes), std::move(sym));
  }
}

void HfBpe::encode_plain(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  std::string normalized;
  if (normalizer_ == "nfc") text = nfc(text, normalized);
  if (!has_splitter_) {
    encode_piece(text, ids);
    return;
  }
  thread_local std::vector<Span> spans;
  spans.clear();
  splitter_.split(text, &spans);
  // encode_piece may recurse into nothing that uses `spans`, so the buffer is safe to reuse.
  for (const Span& s : spans) encode_piece(text.substr(s.begin, s.end - s.begin), ids);
}

void HfBpe::encode(std::string_view text, std::vector<int32_t>* ids) const {
  // Added tokens first, leftmost-longest on the raw text (HF's AddedVocabulary); the text between
  // them goes through normalizer, pre-tokenizer and model.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    if (!added_first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const AddedToken* hit = nullptr;
    for (const AddedToken& t : added_)  // longest first
      if (text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    size_t seg_end = i, next = i + hit->content.size();
    if (hit->lstrip)
      while (seg_end > start && is_space(text[seg_end - 1])) --seg_end;
    if (hit->rstrip)
      while (next < text.size() && is_space(text[next])) ++next;
    encode_plain(text.substr(start, seg_end - start), ids);
    ids->push_back(hit->id);
    start = i = next;
  }
  encode_plain(text.substr(start), ids);
}

namespace {

// Bytes as UTF-8, each maximal invalid subsequence replaced by U+FFFD: what HF's ByteLevel decoder
// returns (Rust's String::from_utf8_lossy), and what ICU's UTF-8 conversion does (the same
// "maximal subpart" practice: equal on 200,000 random byte strings). Byte-level tokens split
// characters (Llama 3 spends ~1.2 tokens per Bangla character), so a slice of ids, a sample cut at
// a window's edge, decodes to partial characters, which a JSON writer or a terminal must not get raw.
std::string utf8_lossy(std::string s) {
  if (data::is_valid_utf8(s)) return s;
  std::string out;
  icu::UnicodeString::fromUTF8(s).toUTF8String(out);
  return out;
}

}  // namespace

std::string HfBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab_size()) out += bytes_[id];
  return utf8_lossy(out);
}

int32_t HfBpe::token_id(const std::string& token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  for (int32_t id = 0; id < vocab_size(); ++id)
    if (token_[id] == token) return id;
  return -1;
}

std::shared_ptr<const HfBpe> HfBpe::without_ignore_merges() const {
  auto copy = std::make_shared<HfBpe>(*this);
  copy->ignore_merges_ = false;
  copy->cache_tag_ = cache_tag_ ^ 0x8000000000000000ULL;
  return copy;
}

}  // namespace lm::tokenizer
