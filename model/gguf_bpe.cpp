#include "model/gguf_bpe.h"

#include "absl/strings/str_cat.h"
#include "tokenizer/pretokenize.h"

namespace lm::model {
namespace {

// GPT-2's own split (ByteLevel with use_regex true): llama.cpp's "gpt-2".
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// gguf TokenType (gguf-py constants.py; = SentencePiece's piece types).
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// convert_hf_to_gguf.py's does_token_look_special: added tokens some checkpoints forget to mark.
bool looks_special(const std::string& t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  return t.size() >= 4 && t.rfind("<|", 0) == 0 && t.compare(t.size() - 2, 2, "|>") == 0;
}

// The Split regex of pre_tokenizer (a Split, or a Sequence of Split and ByteLevel; GPT-2's
// pattern for a lone ByteLevel with use_regex): the only shapes byte-level BPE checkpoints use.
absl::StatusOr<std::string> split_pattern(const Json& pre, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": pre_tokenizer: ", what,
                                                   " (llama.cpp's byte-level BPE needs one Split regex + ByteLevel)"));
  };
  std::vector<Json> parts;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
    parts.assign(pre["pretokenizers"].begin(), pre["pretokenizers"].end());
  else if (pre.is_object())
    parts.push_back(pre);
  std::string pattern;
  bool byte_level = false;
  for (const Json& p : parts) {
    const std::string type = p.value("type", "");
    if (type == "Split" && pattern.empty() && p.contains("pattern") && p["pattern"].contains("Regex")) {
      pattern = p["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      byte_level = true;
      if (p.value("use_regex", true) && pattern.empty()) pattern = kGpt2Pattern;
    } else {
      return bad("'" + type + "' step");
    }
  }
  if (!byte_level || pattern.empty()) return bad("no ByteLevel step or no Split regex");
  return pattern;
}

absl::Status read_tokens(const Json& j, int64_t rows, const std::string& where, BpeVocab& v) {
  v.tokens.resize(rows);
  v.types.assign(rows, kUnused);
  for (int64_t i = 0; i < rows; ++i) v.tokens[i] = absl::StrCat("[PAD", i, "]");
  auto place = [&](int64_t id, const std::string& text, int32_t type, const char* field) -> absl::Status {
    if (id < 0 || id >= rows)
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": ", field, " '", text, "' has id ", id, " but the model has ", rows,
          " embedding rows (the run's tokenizer does not belong to this model)"));
    v.tokens[id] = text;
    v.types[id] = type;
    return absl::OkStatus();
  };
  for (auto& [text, id] : j["model"]["vocab"].items())
    LM_RETURN_IF_ERROR(place(id.get<int64_t>(), text, kNormal, "model.vocab"));
  for (const Json& a : j.value("added_tokens", Json::array())) {
    std::string text = a.value("content", "");
    const bool control = a.value("special", false) || looks_special(text);
    if (!control) {  // the converter pre-normalizes user-defined spaces
      for (size_t p; (p = text.find("\xe2\x96\x81")) != std::string::npos;) text.replace(p, 3, " ");
    }
    LM_RETURN_IF_ERROR(place(a.value("id", int64_t{-1}), text, control ? kControl : kUserDefined, "added_tokens"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BpeVocab> read_bpe_vocab(const std::string& json_text, int64_t rows, const std::string& where) {
  const Json j = Json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_object())
    return absl::DataLossError(absl::StrCat(where, ": not an HF tokenizer.json (copy the run's tokenizer again)"));
  const Json& m = j["model"];
  if (m.value("type", "") != "BPE" || !m.contains("vocab") || !m["vocab"].is_object())
    return absl::InvalidArgumentError(absl::StrCat(where, ": model.type '", m.value("type", ""),
                                                   "': only byte-level BPE is written as llama.cpp's gpt2 tokenizer"));
  BpeVocab v;
  LM_ASSIGN_OR_RETURN(v.pattern, split_pattern(j.value("pre_tokenizer", Json()), where));
  v.ignore_merges = m.value("ignore_merges", false);
  LM_RETURN_IF_ERROR(read_tokens(j, rows, where, v));
  for (const Json& mg : m.value("merges", Json::array())) {
    if (mg.is_string()) {
      v.merges.push_back(mg.get<std::string>());
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      v.merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
    } else {
      return absl::DataLossError(absl::StrCat(where, ": model.merges[", v.merges.size(), "]: expected \"a b\" or [a, b]"));
    }
  }
  return v;
}

absl::StatusOr<std::string> llama_cpp_pre(const std::string& pattern, bool ignore_merges, const std::string& where) {
  struct Known {
    const char* pattern;
    bool ignore_merges;
    const char* pre;
  };
  static const Known kKnown[] = {
      {tokenizer::kLlama3Pattern, true, "llama-bpe"},
      {tokenizer::kQwen2Pattern, false, "qwen2"},
      {tokenizer::kQwen35Pattern, false, "qwen35"},
      {tokenizer::kGpt4oPattern, true, "granite-embed-multi-97m"},
      {kGpt2Pattern, false, "gpt-2"},
  };
  for (const Known& k : kKnown)
    if (pattern == k.pattern && ignore_merges == k.ignore_merges) return std::string(k.pre);
  for (const Known& k : kKnown)
    if (pattern == k.pattern)
      return absl::UnimplementedError(absl::StrCat(
          where, ": model.ignore_merges is ", ignore_merges ? "true" : "false", " but llama.cpp's pre-tokenizer for this "
          "split pattern (\"", k.pre, "\") has it ", k.ignore_merges ? "on" : "off", ", and a GGUF cannot say otherwise: "
          "llama.cpp would tokenize differently (extend the base with --split qwen35 for Qwen2 or gpt-4o for Llama 3, or "
          "export --format hf)"));
  return absl::UnimplementedError(absl::StrCat(
      where, ": the pre-tokenizer's split pattern \"", pattern.substr(0, 80), pattern.size() > 80 ? "..." : "",
      "\" is not one llama.cpp implements (a GGUF names its pre-tokenizer, tokenizer.ggml.pre; llama.cpp knows Llama 3's, "
      "Qwen2's, qwen35 and GPT-4o's with combining marks), so llama.cpp would split text differently from lmforge; "
      "a tokenizer from 'tokenizer --extend --split llama3-marks' is such a case: extend the base again with "
      "--split gpt-4o (Llama 3) or --split qwen35 (Qwen2), or export --format hf"));
}

void add_bpe_tokenizer_metadata(GgufWriter& w, const BpeVocab& v, const std::string& pre, const SpecialTokens& sp) {
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", v.types);
  w.add_string_array("tokenizer.ggml.merges", v.merges);
  // Only the ids the run's tokenizer has (Qwen2: no BOS); llama.cpp keeps its own default otherwise.
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  auto id = [&](const char* key, int64_t value) {
    if (value >= 0 && value < n) w.add_u32(key, static_cast<uint32_t>(value));
  };
  id("tokenizer.ggml.bos_token_id", sp.bos_id);
  id("tokenizer.ggml.eos_token_id", sp.eos_id);
  id("tokenizer.ggml.unknown_token_id", sp.unk_id);
  id("tokenizer.ggml.padding_token_id", sp.pad_id);
  // The framing: a document starts with BOS in training (Llama 3), so llama.cpp starts a prompt with it.
  w.add_bool("tokenizer.ggml.add_bos_token", sp.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

std::string bpe_token_text(const BpeVocab& v, int64_t id) {
  return id >= 0 && id < static_cast<int64_t>(v.tokens.size()) ? v.tokens[id] : std::string();
}

}  // namespace lm::model
