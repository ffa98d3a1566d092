#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include <unicode/uchar.h>

namespace lm::tokenizer {
namespace {

enum Cls { kLetter, kNumber, kSpace, kOther };

// Decodes one code point at s[i] (invalid bytes count as one "other" code point); sets len.
UChar32 cp_at(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  UChar32 cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return cp;
}

Cls cls_of(UChar32 cp) {
  if (cp < 0x80) {
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return kSpace;
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    return kOther;
  }
  const int32_t mask = U_GET_GC_MASK(cp);
  if (mask & U_GC_L_MASK) return kLetter;
  if (mask & U_GC_N_MASK) return kNumber;
  if (u_isUWhiteSpace(cp)) return kSpace;
  return kOther;  // includes \p{M}: the Bengali trap
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  const size_t n = s.size();
  static const char* kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  while (i < n) {
    if (s[i] == '\'') {
      bool hit = false;
      for (const char* c : kContractions) {
        std::string_view cv(c);
        if (s.substr(i, cv.size()) == cv) {
          out.push_back(s.substr(i, cv.size()));
          i += cv.size();
          hit = true;
          break;
        }
      }
      if (hit) continue;
    }
    size_t len;
    UChar32 cp = cp_at(s, i, &len);
    Cls c = cls_of(cp);
    size_t start = i, j = i;
    if (cp == ' ' && i + 1 < n) {  // " ?" prefix of a letter/number/other run
      size_t l2;
      Cls c2 = cls_of(cp_at(s, i + 1, &l2));
      if (c2 != kSpace) {
        j = i + 1;
        c = c2;
      }
    }
    if (c != kSpace) {
      while (j < n) {
        size_t l;
        if (cls_of(cp_at(s, j, &l)) != c) break;
        j += l;
      }
      out.push_back(s.substr(start, j - start));
      i = j;
      continue;
    }
    // Whitespace run: \s+(?!\S) leaves the last whitespace for the next word; \s+ otherwise.
    size_t e = i, last = i;
    while (e < n) {
      size_t l;
      if (cls_of(cp_at(s, e, &l)) != kSpace) break;
      last = e;
      e += l;
    }
    if (e < n && last > i) e = last;
    out.push_back(s.substr(i, e - i));
    i = e;
  }
  return out;
}

namespace {

// The pre-tokenized words of `texts` as byte symbols with their counts, in a deterministic order
// (sorted by symbols) regardless of hash-map iteration.
struct WordCounts {
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
};

WordCounts count_words(const std::vector<std::string>& texts) {
  std::unordered_map<std::string_view, int64_t> counts;
  for (const auto& t : texts)
    for (auto w : gpt2_pretokenize(t)) ++counts[w];
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  words.reserve(counts.size());
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> sym;
    for (unsigned char ch : w) sym.push_back(ByteBpe::kSpecials + ch);
    words.push_back(std::move(sym));
    freq.push_back(c);
  }
  std::vector<size_t> order(words.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return words[a] < words[b]; });
  {
    std::vector<std::vector<int32_t>> w2;
    std::vector<int64_t> f2;
    for (size_t i : order) {
      w2.push_back(std::move(words[i]));
      f2.push_back(freq[i]);
    }
    words.swap(w2);
    freq.swap(f2);
  }
  return {std::move(words), std::move(freq)};
}

// `sym` with every (a, b) pair replaced by `id`, left to right.
std::vector<int32_t> merge_pair(const std::vector<int32_t>& sym, int32_t a, int32_t b, int32_t id) {
  std::vector<int32_t> merged;
  for (size_t k = 0; k < sym.size(); ++k) {
    if (k + 1 < sym.size() && sym[k] == a && sym[k + 1] == b) {
      merged.push_back(id);
      ++k;
    } else {
      merged.push_back(sym[k]);
    }
  }
  return merged;
}

}  // namespace

ByteBpe ByteBpe::train(const std::vector<std::string>& texts, int vocab_size) {
  ByteBpe bpe;
  bpe.pieces_.resize(kFirstMerge);
  for (int b = 0; b < 256; ++b) bpe.pieces_[kSpecials + b] = std::string(1, static_cast<char>(b));
  WordCounts counted = count_words(texts);
  auto& words = counted.words;
  const auto& freq = counted.freq;
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // may list a word more than once
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t k = 0; k + 1 < words[w].size(); ++k) {
      const uint64_t p = pair_key(words[w][k], words[w][k + 1]);
      pair_count[p] += freq[w];
      where[p].push_back(static_cast<int32_t>(w));
    }
  using Item = std::pair<int64_t, uint64_t>;  // (count, -key via comparator)
  auto cmp = [](const Item& a, const Item& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; };
  std::priority_queue<Item, std::vector<Item>, decltype(cmp)> heap(cmp);
  for (const auto& [p, c] : pair_count) heap.push({c, p});
  while (static_cast<int>(bpe.pieces_.size()) < vocab_size && !heap.empty()) {
    auto [c, p] = heap.top();
    heap.pop();
    auto it = pair_count.find(p);
    if (it == pair_count.end() || it->second != c) continue;  // stale
    if (c < 2) break;
    const int32_t a = static_cast<int32_t>(p >> 32), b = static_cast<int32_t>(p & 0xffffffffu);
    const int32_t id = static_cast<int32_t>(bpe.pieces_.size());
    bpe.pieces_.push_back(bpe.pieces_[a] + bpe.pieces_[b]);
    bpe.merge_rank_[p] = id;
    std::vector<int32_t> ws = std::move(where[p]);
    where.erase(p);
    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    std::unordered_set<uint64_t> touched;
    for (int32_t w : ws) {
      auto& sym = words[w];
      bool has = false;
      for (size_t k = 0; k + 1 < sym.size(); ++k) has = has || (sym[k] == a && sym[k + 1] == b);
      if (!has) continue;
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        const uint64_t q = pair_key(sym[k], sym[k + 1]);
        pair_count[q] -= freq[w];
        touched.insert(q);
      }
      sym = merge_pair(sym, a, b, id);
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        const uint64_t q = pair_key(sym[k], sym[k + 1]);
        pair_count[q] += freq[w];
        touched.insert(q);
        if (q != p) where[q].push_back(w);
      }
    }
    pair_count.erase(p);
    for (uint64_t q : touched) {
      auto qi = pair_count.find(q);
      if (qi == pair_count.end()) continue;
      if (qi->second <= 0) {
        pair_count.erase(qi);
      } else {
        heap.push({qi->second, q});
      }
    }
  }
  return bpe;
}

void ByteBpe::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  std::vector<int32_t> sym;
  for (unsigned char ch : word) sym.push_back(kSpecials + ch);
  while (sym.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      auto it = merge_rank_.find(pair_key(sym[k], sym[k + 1]));
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        at = k;
      }
    }
    if (best == INT32_MAX) break;
    sym = merge_pair(sym, sym[at], sym[at + 1], best);
  }
  out->insert(out->end(), sym.begin(), sym.end());
}

std::vector<int32_t> ByteBpe::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (auto w : gpt2_pretokenize(text)) encode_word(w, &ids);
  return ids;
}

std::string ByteBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids)
    if (id >= kSpecials && id < static_cast<int32_t>(pieces_.size())) out += pieces_[id];
  return out;
}

}  // namespace lm::tokenizer
