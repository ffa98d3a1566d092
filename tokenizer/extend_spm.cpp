// Vocabulary extension of a SentencePiece BPE tokenizer.model (Llama 2): new pieces appended after
// every existing id, scored below every base piece, so SentencePiece (and llama.cpp's and HF's
// conversions of it, which rank merges by the merged piece's score) apply every base merge first
// and the new ones after, in the order they were learned:
//   1. single characters the guard allows that the base has no piece for (Llama 2 spends three
//      byte-fallback tokens on each), most frequent first, seen --min-count times (--guard bengali
//      also gives Bengali digits and signs theirs);
//   2. merges learned on the corpus words (SentencePiece's whitespace pieces) as the base plus those
//      characters encodes them; a merge joins two pieces that are both in the vocabulary, so a
//      converter that only lists such pairs (transformers' SentencePieceExtractor) reaches it too;
//   3. the reachability check of the byte-level path: a new piece no corpus word and not its own
//      text reaches is dropped with the pieces built on it, until all are reached.
// Text without what the guard asks for (a Bengali letter or a combining mark by default) never
// meets a new piece (each holds one), so it encodes exactly as under the base.
#include <unicode/utf8.h>

#include <algorithm>

#include <absl/container/flat_hash_map.h>

#include "core/file.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "tokenizer/extend_internal.h"
#include "tokenizer/model_proto.h"

namespace lm::tokenizer {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
// Scores at or below this are not merge ranks (Llama 2 puts its whitespace-run pieces at -1e9).
constexpr float kManualScore = -1e8f;
constexpr int32_t kUnusedPiece = 5, kUserPiece = 4;

struct SpmExtension {
  ModelParts base;  // the base's pieces, plus UNUSED fillers up to the checkpoint's rows
  float top_score = 0;  // the first new piece's; each later one is 1 lower
  // The new pieces in rank order from the first id after `base`: bytes are the piece's text as
  // SentencePiece spells it; a merge's left/right are the ids it joins (-1: a single character).
  NewTokens t;
  std::vector<std::string> words;  // distinct escaped corpus words a new piece could reach
  std::vector<int64_t> counts;
  int64_t all_words = 0;
};

ModelParts model_parts(const SpmExtension& e) {
  ModelParts m = e.base;
  for (size_t i = 0; i < e.t.bytes.size(); ++i)
    m.pieces.push_back({e.t.bytes[i], e.top_score - static_cast<float>(i), kNormalPiece});
  return m;
}

std::string model_bytes(const SpmExtension& e) { return serialize_model_parts(model_parts(e)); }

// Appends a new piece; a single character's left/right are -1.
void add_piece(SpmExtension& e, std::string piece, int64_t count, int32_t left = -1, int32_t right = -1) {
  const int32_t id = e.t.first_id + static_cast<int32_t>(e.t.bytes.size());
  e.t.merges.push_back({left, right, id, count});
  e.t.bytes.push_back(std::move(piece));
}

std::string piece_text(std::string piece) {
  for (size_t at = piece.find(kSpace); at != std::string::npos; at = piece.find(kSpace, at))
    piece.replace(at, kSpace.size(), " ");
  return piece;
}

// The base model's pieces, padded with UNUSED pieces to the checkpoint's rows (new ids start there).
absl::StatusOr<SpmExtension> read_base(const BaseTokenizer& b) {
  SpmExtension e;
  if (!parse_model_parts(b.spm_bytes, &e.base))
    return absl::DataLossError(absl::StrCat(b.dir, "/", kForeignSpmFile, ": not a SentencePiece model"));
  const int32_t rows = b.tok.vocab_size();
  for (int32_t id = static_cast<int32_t>(e.base.pieces.size()); id < rows; ++id)
    e.base.pieces.push_back({absl::StrCat("<lmforge_unused_", id, ">"), 0.0f, kUnusedPiece});
  e.t.first_id = static_cast<int32_t>(e.base.pieces.size());
  float floor = 0;
  for (const ModelPiece& p : e.base.pieces)
    if (p.type == kNormalPiece && p.score > kManualScore) floor = std::min(floor, p.score);
  e.top_score = floor - 1;
  return e;
}

// The corpus's distinct words (escaped as SentencePiece does) that the guard lets a new piece reach.
void count_words(const TrainingSample& s, bool dummy_prefix, const std::string& guard, SpmExtension& e) {
  absl::flat_hash_map<std::string, int64_t> counts;
  std::string buf;
  for (const std::string& line : s.sentences)
    SpmWords::for_each_word(line, dummy_prefix, &buf, [&](std::string_view w) {
      ++e.all_words;
      if (guard_allows(w, guard)) ++counts[absl::string_view(w.data(), w.size())];
    });
  // A deterministic order (by text): the same corpus gives the same pieces.
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  for (auto& [w, n] : sorted) e.words.push_back(std::move(w)), e.counts.push_back(n);
}

// Step 1: characters the guard allows that no base piece is, by count (ties by text).
void add_characters(const ExtendOptions& o, SpmExtension& e) {
  absl::flat_hash_set<std::string> known;
  for (const ModelPiece& p : e.base.pieces) known.insert(p.piece);
  absl::flat_hash_map<std::string, int64_t> counts;
  for (size_t w = 0; w < e.words.size(); ++w) {
    const auto* s = reinterpret_cast<const uint8_t*>(e.words[w].data());
    const int32_t len = static_cast<int32_t>(e.words[w].size());
    for (int32_t i = 0; i < len;) {
      const int32_t start = i;
      UChar32 c;
      U8_NEXT(s, i, len, c);
      const std::string ch = e.words[w].substr(start, i - start);
      if (c >= 0 && !known.contains(ch) && guard_allows(ch, o.guard)) counts[ch] += e.counts[w];
    }
  }
  std::vector<std::pair<int64_t, std::string>> by_count;
  for (auto& [ch, n] : counts)
    if (n >= o.min_count) by_count.push_back({-n, ch});
  std::sort(by_count.begin(), by_count.end());
  for (auto& [n, ch] : by_count)
    if (static_cast<int64_t>(e.t.bytes.size()) < o.add) add_piece(e, ch, -n);
}

// Step 2: merges learned on the words as base + characters encodes them. Byte, control and
// unknown pieces never merge (their stand-in bytes are not UTF-8, which `allowed` refuses).
void add_merges(const ExtendOptions& o, SpmExtension& e) {
  const int64_t room = o.add - static_cast<int64_t>(e.t.bytes.size());
  if (room <= 0) return;
  const ModelParts m = model_parts(e);
  const auto words = SpmWords::make(serialize_model_parts(m));
  if (!words) return;  // not reached: characters hold no "▁" (load_base checked the base)
  std::vector<std::string> token_bytes;
  absl::flat_hash_set<std::string> taken;
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    const ModelPiece& p = m.pieces[id];
    const bool text = p.type == kNormalPiece || p.type == kUserPiece;
    token_bytes.push_back(text ? p.piece : absl::StrCat("\xff", id));
    taken.insert(p.piece);
  }
  WordBag bag;
  for (size_t w = 0; w < e.words.size(); ++w) {
    bag.ids.emplace_back();
    words->encode_word(e.words[w], &bag.ids.back());
    bag.counts.push_back(e.counts[w]);
  }
  MergeTrainOptions mo;
  mo.merges = room;
  mo.first_id = static_cast<int32_t>(m.pieces.size());
  mo.min_count = o.min_count;
  mo.allowed = [guard = o.guard](std::string_view s) { return data::is_valid_utf8(s) && guard_allows(s, guard); };
  mo.progress = [](int64_t done, int64_t total, int64_t count) {
    log_info("  merges %ld / %ld (the last pair seen %ld times)", static_cast<long>(done), static_cast<long>(total),
             static_cast<long>(count));
  };
  for (const NewMerge& nm : learn_merges(bag, token_bytes, taken, mo))
    add_piece(e, token_bytes[nm.id], nm.count, nm.left, nm.right);
}

// New pieces no corpus word and not their own text reaches (1 = dead), under the model with all.
absl::StatusOr<std::vector<char>> unreachable(const SpmExtension& e) {
  const auto words = SpmWords::make(model_bytes(e));
  if (!words) return absl::InternalError("the extended tokenizer.model is not one SpmWords encodes exactly");
  const int32_t first = e.t.first_id;
  std::vector<char> used(e.t.bytes.size(), 0);
  std::vector<int32_t> ids;
  for (const std::string& w : e.words) {
    ids.clear();
    words->encode_word(w, &ids);
    for (int32_t id : ids)
      if (id >= first) used[id - first] = 1;
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (used[i]) continue;
    ids.clear();
    words->encode_word(e.t.bytes[i], &ids);
    used[i] = ids.size() == 1 && ids[0] == first + static_cast<int32_t>(i);
  }
  for (char& u : used) u = !u;
  return used;
}

Json extension_json(const BaseTokenizer& b, const SpmExtension& e, const ExtendOptions& o) {
  const SpmWords& base_words = *b.tok.spm_word_encoder();  // the base's own (load_base checked it is there)
  Json tokens = Json::array();
  std::vector<int32_t> pieces;
  for (size_t i = 0; i < e.t.bytes.size(); ++i) {
    pieces.clear();
    base_words.encode_word(e.t.bytes[i], &pieces);
    tokens.push_back({{"id", e.t.merges[i].id}, {"token", e.t.bytes[i]},
                      {"bytes_hex", hex_bytes(piece_text(e.t.bytes[i]))}, {"base_pieces", pieces},
                      {"count", e.t.merges[i].count}});
  }
  return {{"format", kExtensionFormat},
          {"base_tokenizer_hash", b.tok.hash()},
          {"base_vocab_size", b.tok.vocab_size()},
          {"vocab_size", e.t.first_id + static_cast<int64_t>(e.t.bytes.size())},
          {"split", "sentencepiece-words"},
          {"split_pattern", ""},
          {"guard", o.guard},
          {"new_tokens", tokens}};
}

}  // namespace

absl::StatusOr<ExtensionWriter> prepare_spm_extension(const ExtendOptions& o, const BaseTokenizer& b,
                                                      const TrainingSample& sample, ExtendResult& r) {
  LM_ASSIGN_OR_RETURN(SpmExtension base, read_base(b));
  auto e = std::make_shared<SpmExtension>(std::move(base));
  count_words(sample, b.tok.spm_word_encoder()->dummy_prefix(), o.guard, *e);
  log_info("%s words, %s distinct ones can take a new piece (guard %s); SentencePiece's whitespace words (--split "
           "does not apply to a SentencePiece base)",
           format_count(static_cast<double>(e->all_words)), format_count(static_cast<double>(e->words.size())),
           o.guard);
  add_characters(o, *e);
  const size_t chars = e->t.bytes.size();
  add_merges(o, *e);
  log_info("new pieces: %zu characters the base spells in bytes, %zu merges, scores from %.0f down", chars,
           e->t.bytes.size() - chars, e->top_score);
  r.learned = static_cast<int64_t>(e->t.bytes.size());
  r.split = "sentencepiece-words";
  r.words = e->all_words;
  r.distinct_words = static_cast<int64_t>(e->words.size());
  return ExtensionWriter([e, &b, o](const std::string& dir) -> absl::StatusOr<int64_t> {
    int64_t pruned = 0;
    for (int round = 1;; ++round) {
      LM_ASSIGN_OR_RETURN(std::vector<char> dead, unreachable(*e));
      const int64_t n_dead = std::count(dead.begin(), dead.end(), 1);
      log_info("reachability check %d: %ld of %zu new pieces unreached", round, static_cast<long>(n_dead),
               e->t.bytes.size());
      if (n_dead == 0) break;
      pruned += prune(e->t, dead);
    }
    const std::string bytes = model_bytes(*e);
    Json ext = extension_json(b, *e, o);
    Json meta = b.meta;
    meta["hash"] = model_hash(bytes);
    meta["vocab_size"] = ext["vocab_size"];
    meta["model_file"] = kForeignSpmFile;
    meta["source"] = absl::StrCat("vocabulary extension of ", o.base, " (hash ", b.tok.hash(), ", vocab ",
                                  b.tok.vocab_size(), ") by ", e->t.bytes.size(), " pieces learned on ", o.corpus);
    LM_RETURN_IF_ERROR(make_dirs(dir));
    LM_RETURN_IF_ERROR(write_file_atomic(dir + "/" + kForeignSpmFile, bytes));
    LM_RETURN_IF_ERROR(write_json_file(dir + "/" + kMetaFile, meta));
    LM_RETURN_IF_ERROR(write_json_file(dir + "/" + kExtensionFile, ext));
    return pruned;
  });
}

}  // namespace lm::tokenizer
