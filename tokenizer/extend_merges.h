// The trainer of new BPE merges on top of a base byte-level BPE (vocabulary extension, extend.h):
// words already encoded by the base tokenizer, each with its count, are merged greedily by weighted
// pair frequency, with pair counts updated incrementally (only the words holding the chosen pair
// are touched), as HF tokenizers' and SentencePiece's BPE trainers do. A pair whose merged bytes
// the caller does not allow (the guard that keeps text without Bangla exact) is never chosen.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/container/flat_hash_set.h>

namespace lm::tokenizer {

// Distinct pre-tokenized words as the base tokenizer's ids, with how often each occurs.
struct WordBag {
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> counts;
};

struct NewMerge {
  int32_t left = 0, right = 0;  // the pair, base or earlier new ids
  int32_t id = 0;               // the merged token
  int64_t count = 0;            // the pair's weighted frequency when it was chosen
};

struct MergeTrainOptions {
  int64_t merges = 0;     // how many to learn at most
  int32_t first_id = 0;   // the first new token's id (later ones follow)
  int64_t min_count = 2;  // a pair seen fewer times is not worth a token: training stops there
  // May a token with these bytes be made? (false: the pair is never merged)
  std::function<bool(std::string_view)> allowed;
  // Called now and then with (merges done, merges asked, the last merge's count).
  std::function<void(int64_t, int64_t, int64_t)> progress;
};

// Learns up to o.merges merges on `words` (merged in place). `token_bytes` holds every base id's
// bytes and gets each new token's appended; `taken` holds the bytes of every existing token (a
// pair that would make one of them again is skipped: a vocabulary maps bytes to one id).
std::vector<NewMerge> learn_merges(WordBag& words, std::vector<std::string>& token_bytes,
                                   absl::flat_hash_set<std::string>& taken, const MergeTrainOptions& o);

}  // namespace lm::tokenizer
