// The extended tokenizer's files: hf-tokenizer.json (the base's with the new pattern, vocabulary
// and merges), tokenizer.json, extension.json; the reachability check and pruning; the report.
#include <sys/stat.h>
#include <unicode/utf8.h>

#include <thread>

#include "core/file.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "tokenizer/extend_internal.h"

namespace lm::tokenizer {
namespace {

// Bytes in the ByteLevel alphabet, as tokenizer.json spells a token.
std::string byte_level_text(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    char buf[4];
    int32_t n = 0;
    U8_APPEND_UNSAFE(buf, n, byte_to_unicode()[b]);
    out.append(buf, n);
  }
  return out;
}

// The Split step of a pre_tokenizer (a Sequence's or the only one), or null.
Json* split_step(Json& pre) {
  if (pre.is_object() && pre.value("type", "") == "Split") return &pre;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
    for (Json& p : pre["pretokenizers"])
      if (p.is_object() && p.value("type", "") == "Split") return &p;
  return nullptr;
}

std::string bytes_of(const BaseTokenizer& b, const NewTokens& t, int32_t id) {
  return id >= t.first_id ? t.bytes[id - t.first_id] : b.tok.hf()->token_bytes(id);
}

// hf-tokenizer.json of base + new tokens: the new Split pattern, each new token in model.vocab
// with its id, each merge after the base's in the base's form ("a b" or ["a", "b"]).
Json extended_hf_json(const BaseTokenizer& b, const NewTokens& t, const std::string& pattern) {
  Json j = b.hf_json;
  (*split_step(j["pre_tokenizer"]))["pattern"]["Regex"] = pattern;
  Json& model = j["model"];
  const bool pair_form = !model["merges"].empty() && model["merges"][0].is_array();
  for (size_t i = 0; i < t.merges.size(); ++i) {
    const NewMerge& m = t.merges[i];
    model["vocab"][byte_level_text(t.bytes[i])] = t.first_id + static_cast<int32_t>(i);
    const std::string l = byte_level_text(bytes_of(b, t, m.left)), r = byte_level_text(bytes_of(b, t, m.right));
    model["merges"].push_back(pair_form ? Json::array({l, r}) : Json(l + " " + r));
  }
  return j;
}

// New ids that no text reaches: neither in the extended encoding of the corpus words nor the one
// token of encode(their own text).
std::vector<char> unreachable(const HfBpe& ext, const NewTokens& t, const Corpus& corpus) {
  std::vector<char> used(t.merges.size(), 0);
  std::vector<int32_t> ids;
  for (const std::string& w : corpus.text) {
    ids.clear();
    ext.encode_word(w, &ids);
    for (int32_t id : ids)
      if (id >= t.first_id) used[id - t.first_id] = 1;
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (used[i] || !data::is_valid_utf8(t.bytes[i])) continue;
    ids.clear();
    ext.encode(t.bytes[i], &ids);
    used[i] = ids.size() == 1 && ids[0] == t.first_id + static_cast<int32_t>(i);
  }
  for (char& u : used) u = !u;
  return used;
}

// Prunes until every new token is reached; returns the extended hf-tokenizer.json.
absl::StatusOr<Json> reachable_hf_json(const BaseTokenizer& b, NewTokens& t, const Corpus& corpus,
                                       const std::string& pattern, int64_t* pruned) {
  for (int round = 1;; ++round) {
    Json j = extended_hf_json(b, t, pattern);
    LM_ASSIGN_OR_RETURN(auto ext, HfBpe::parse(j.dump(), "extended hf-tokenizer.json"));
    const std::vector<char> dead = unreachable(*ext, t, corpus);
    const int64_t n_dead = std::count(dead.begin(), dead.end(), 1);
    log_info("reachability check %d: %ld of %zu new tokens unreached", round, static_cast<long>(n_dead),
             t.merges.size());
    if (n_dead == 0) return j;
    *pruned += prune(t, dead);
  }
}

Json extension_json(const BaseTokenizer& b, const NewTokens& t, const ExtendOptions& o, const std::string& pattern) {
  Json tokens = Json::array();
  std::vector<int32_t> pieces;
  for (size_t i = 0; i < t.merges.size(); ++i) {
    pieces.clear();
    b.tok.hf()->encode_word(t.bytes[i], &pieces);
    tokens.push_back({{"id", t.first_id + static_cast<int32_t>(i)}, {"token", byte_level_text(t.bytes[i])},
                      {"bytes_hex", hex_bytes(t.bytes[i])}, {"base_pieces", pieces}, {"count", t.merges[i].count}});
  }
  return {{"format", kExtensionFormat},
          {"base_tokenizer_hash", b.tok.hash()},
          {"base_vocab_size", b.tok.vocab_size()},
          {"vocab_size", b.tok.vocab_size() + static_cast<int64_t>(t.merges.size())},
          {"split", o.split},
          {"split_pattern", pattern},
          {"guard", o.guard},
          {"new_tokens", tokens}};
}

}  // namespace

int64_t prune(NewTokens& t, const std::vector<char>& dead) {
  std::vector<int32_t> new_id(t.merges.size(), -1);
  NewTokens kept;
  kept.first_id = t.first_id;
  auto map = [&](int32_t id) { return id < t.first_id ? id : new_id[id - t.first_id]; };
  for (size_t i = 0; i < t.merges.size(); ++i) {
    NewMerge m = t.merges[i];
    const bool merge = m.left >= 0;  // else a token of its own (a SentencePiece base's new character)
    if (dead[i] || (merge && (map(m.left) < 0 || map(m.right) < 0))) continue;
    new_id[i] = t.first_id + static_cast<int32_t>(kept.merges.size());
    if (merge) m.left = map(m.left), m.right = map(m.right);
    m.id = new_id[i];
    kept.merges.push_back(m);
    kept.bytes.push_back(t.bytes[i]);
  }
  const int64_t dropped = static_cast<int64_t>(t.merges.size() - kept.merges.size());
  t = std::move(kept);
  return dropped;
}

std::string hex_bytes(std::string_view bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) out += d[b >> 4], out += d[b & 15];
  return out;
}

absl::Status make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if ((i == dir.size() || dir[i] == '/') && ::mkdir(dir.substr(0, i).c_str(), 0755) != 0 && errno != EEXIST)
      return errno_status("mkdir", dir.substr(0, i));
  return absl::OkStatus();
}

absl::Status check_base_json(const BaseTokenizer& b, const std::string& where) {
  Json pre = b.hf_json.value("pre_tokenizer", Json());
  if (split_step(pre) == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(where, "/", kHfJsonFile,
                                                      ": pre_tokenizer has no Split step to replace (a byte-level "
                                                      "BPE with a Split regex, as Llama 3 and Qwen2, is expected)"));
  if (!b.hf_json.contains("model") || !b.hf_json["model"].contains("merges"))
    return absl::FailedPreconditionError(absl::StrCat(where, "/", kHfJsonFile, ": model.merges missing"));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> write_extension(const BaseTokenizer& b, NewTokens& t, const Corpus& corpus,
                                        const ExtendOptions& o, const std::string& pattern, const std::string& dir) {
  int64_t pruned = 0;
  LM_ASSIGN_OR_RETURN(Json hf, reachable_hf_json(b, t, corpus, pattern, &pruned));
  Json ext = extension_json(b, t, o, pattern);
  const std::string hf_text = hf.dump(1);
  Json meta = b.meta;
  meta["hash"] = model_hash(hf_text);
  meta["vocab_size"] = ext["vocab_size"];
  meta["source"] = absl::StrCat("vocabulary extension of ", o.base, " (hash ", b.tok.hash(), ", vocab ",
                                b.tok.vocab_size(), ") by ", t.merges.size(), " tokens learned on ", o.corpus,
                                ", split ", o.split);
  LM_RETURN_IF_ERROR(make_dirs(dir));
  LM_RETURN_IF_ERROR(write_file_atomic(dir + "/" + kHfJsonFile, hf_text));
  LM_RETURN_IF_ERROR(write_json_file(dir + "/" + kMetaFile, meta));
  LM_RETURN_IF_ERROR(write_json_file(dir + "/" + kExtensionFile, ext));
  return pruned;
}

absl::Status write_extension_report(const ExtendResult& r, const TrainingSample& sample, const ExtendOptions& o,
                                    const std::string& dir) {
  ReportOptions ro = o.report;
  ro.encoder_name = "extended";
  ro.shown_dir = o.out;  // `dir` is the staging folder, renamed to --out once everything is written
  EncoderFns base = encoder_fns(r.base);
  base.name = "base";
  TrainOptions recipe;
  recipe.vocab_size = r.extended.vocab_size();
  return write_report(r.extended, sample, recipe, ro, dir, {base}).status();
}

}  // namespace lm::tokenizer
