#include "tokenizer/extend_merges.h"

#include <queue>

#include <absl/container/flat_hash_map.h>

namespace lm::tokenizer {
namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t left_of(uint64_t k) { return static_cast<int32_t>(k >> 32); }
int32_t right_of(uint64_t k) { return static_cast<int32_t>(k & 0xffffffffu); }

// Pair counts over all words, the words each pair occurs in (may name a word that no longer holds
// it: checked on use), and a max-heap of (count, pair) that is corrected lazily: an entry whose
// count is stale is pushed again with the current one when it reaches the top.
class PairTable {
 public:
  explicit PairTable(WordBag& w) : w_(w), stamp_(w.ids.size(), -1) {
    for (size_t i = 0; i < w.ids.size(); ++i) add_word(static_cast<int32_t>(i), /*new_id=*/-1, nullptr);
    for (const auto& [k, c] : count_)
      if (c > 0) heap_.push({c, k});
  }

  // The most frequent pair not refused by `skip`, or count 0 when none is left.
  template <class Skip>
  std::pair<int64_t, uint64_t> best(const Skip& skip) {
    while (!heap_.empty()) {
      const auto [c, k] = heap_.top();
      heap_.pop();
      const auto it = count_.find(k);
      const int64_t now = it == count_.end() ? 0 : it->second;
      if (now != c) {  // stale: counts of old pairs only fall
        if (now > 0) heap_.push({now, k});
        continue;
      }
      if (skip(k)) continue;
      return {c, k};
    }
    return {0, 0};
  }

  // Merges pair `k` into `id` in every word that holds it.
  void merge(uint64_t k, int32_t id) {
    std::vector<int32_t> words = std::move(where_[k]);
    where_.erase(k);
    std::vector<uint64_t> touched;
    for (int32_t i : words) {
      if (stamp_[i] == id) continue;  // listed twice
      stamp_[i] = id;
      remove_word(i);
      merge_in(w_.ids[i], left_of(k), right_of(k), id);
      add_word(i, id, &touched);
    }
    count_.erase(k);
    for (uint64_t t : touched)
      if (auto it = count_.find(t); it != count_.end() && it->second > 0) heap_.push({it->second, t});
  }

 private:
  void remove_word(int32_t i) {
    const auto& s = w_.ids[i];
    for (size_t j = 0; j + 1 < s.size(); ++j) count_[pair_key(s[j], s[j + 1])] -= w_.counts[i];
  }
  // Counts word i's pairs; pairs holding `new_id` (new ones) also list the word and are `touched`.
  void add_word(int32_t i, int32_t new_id, std::vector<uint64_t>* touched) {
    const auto& s = w_.ids[i];
    for (size_t j = 0; j + 1 < s.size(); ++j) {
      const uint64_t k = pair_key(s[j], s[j + 1]);
      count_[k] += w_.counts[i];
      if (new_id >= 0 && s[j] != new_id && s[j + 1] != new_id) continue;
      auto& list = where_[k];
      if (list.empty() || list.back() != i) list.push_back(i);
      if (touched) touched->push_back(k);
    }
  }
  static void merge_in(std::vector<int32_t>& s, int32_t a, int32_t b, int32_t id) {
    size_t w = 0;
    for (size_t r = 0; r < s.size(); ++r) {
      if (r + 1 < s.size() && s[r] == a && s[r + 1] == b) {
        s[w++] = id;
        ++r;
      } else {
        s[w++] = s[r];
      }
    }
    s.resize(w);
  }

  WordBag& w_;
  std::vector<int32_t> stamp_;  // the last merge that touched each word
  absl::flat_hash_map<uint64_t, int64_t> count_;
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> where_;
  std::priority_queue<std::pair<int64_t, uint64_t>> heap_;
};

}  // namespace

std::vector<NewMerge> learn_merges(WordBag& words, std::vector<std::string>& token_bytes,
                                   absl::flat_hash_set<std::string>& taken, const MergeTrainOptions& o) {
  PairTable table(words);
  absl::flat_hash_set<uint64_t> refused;
  std::vector<NewMerge> out;
  auto skip = [&](uint64_t k) {
    if (refused.contains(k)) return true;
    const std::string bytes = token_bytes[left_of(k)] + token_bytes[right_of(k)];
    if (taken.contains(bytes) || (o.allowed && !o.allowed(bytes))) {
      refused.insert(k);
      return true;
    }
    return false;
  };
  while (static_cast<int64_t>(out.size()) < o.merges) {
    const auto [count, k] = table.best(skip);
    if (count < o.min_count || count == 0) break;
    const int32_t id = o.first_id + static_cast<int32_t>(out.size());
    token_bytes.resize(std::max<size_t>(token_bytes.size(), static_cast<size_t>(id) + 1));
    token_bytes[id] = token_bytes[left_of(k)] + token_bytes[right_of(k)];
    taken.insert(token_bytes[id]);
    table.merge(k, id);
    out.push_back({left_of(k), right_of(k), id, count});
    if (o.progress && (out.size() % 1000 == 0 || static_cast<int64_t>(out.size()) == o.merges))
      o.progress(static_cast<int64_t>(out.size()), o.merges, count);
  }
  return out;
}

}  // namespace lm::tokenizer
