// tokenizer.json -> HfBpe: the fields of a byte-level BPE tokenizer, read strictly enough that a
// tokenizer this code would encode differently from HF is refused, naming the field.
#include <unicode/utf8.h>

#include <algorithm>
#include <atomic>

#include "core/config.h"
#include "tokenizer/hf_bpe.h"

namespace lm::tokenizer {

struct HfJsonParser {
  HfBpe& t;
  std::string where;
  absl::flat_hash_map<std::string, int32_t> by_text;  // tokenizer.json text -> id (model vocab)

  absl::Status bad(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, ": ", what,
                                                   " (lmforge reads byte-level BPE tokenizers: Llama 3, Qwen2, "
                                                   "GPT-4o style; docs/tokenizer.md, \"Foreign tokenizers\")"));
  }

  // A token's text in the ByteLevel alphabet -> the bytes it stands for (text that is not in that
  // alphabet, as in an added token, stands for its own UTF-8).
  static std::string to_bytes(const std::string& text) {
    static const absl::flat_hash_map<char32_t, uint8_t> inverse = [] {
      absl::flat_hash_map<char32_t, uint8_t> m;
      for (int b = 0; b < 256; ++b) m[byte_to_unicode()[b]] = static_cast<uint8_t>(b);
      return m;
    }();
    std::string out;
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const int32_t len = static_cast<int32_t>(text.size());
    for (int32_t i = 0; i < len;) {
      UChar32 c;
      U8_NEXT(s, i, len, c);
      auto it = inverse.find(static_cast<char32_t>(c));
      if (c < 0 || it == inverse.end()) return text;
      out.push_back(static_cast<char>(it->second));
    }
    return out;
  }

  void set_token(int32_t id, const std::string& text, bool special) {
    if (id >= static_cast<int32_t>(t.token_.size())) {
      t.token_.resize(id + 1);
      t.bytes_.resize(id + 1);
      t.special_.resize(id + 1, 0);
    }
    t.token_[id] = text;
    t.bytes_[id] = special ? text : to_bytes(text);
    t.special_[id] = special;
  }

  absl::Status normalizer(const Json& j) {
    if (j.is_null()) return absl::OkStatus();
    const std::string type = j.value("type", "");
    if (type == "NFC") {
      t.normalizer_ = "nfc";
      return absl::OkStatus();
    }
    if (type == "Sequence" && j.contains("normalizers")) {
      for (const Json& n : j["normalizers"]) LM_RETURN_IF_ERROR(normalizer(n));
      return absl::OkStatus();
    }
    return bad("normalizer.type", absl::StrCat("'", type, "' is not implemented (none or NFC are)"));
  }

  absl::Status pre_tokenizer_part(const Json& j, bool* byte_level) {
    const std::string type = j.value("type", "");
    if (type == "Split") {
      if (t.has_splitter_) return bad("pre_tokenizer", "two Split steps");
      if (j.value("behavior", "") != "Isolated" || j.value("invert", false))
        return bad("pre_tokenizer.Split", "only behavior Isolated without invert is implemented");
      if (!j.contains("pattern") || !j["pattern"].contains("Regex"))
        return bad("pre_tokenizer.Split.pattern", "a Regex is expected");
      LM_ASSIGN_OR_RETURN(t.splitter_, Splitter::make(j["pattern"]["Regex"].get<std::string>(), where));
      t.has_splitter_ = true;
      return absl::OkStatus();
    }
    if (type == "ByteLevel") {
      if (j.value("add_prefix_space", false))
        return bad("pre_tokenizer.ByteLevel.add_prefix_space", "true is not implemented");
      if (j.value("use_regex", true)) {  // GPT-2's own split
        if (t.has_splitter_) return bad("pre_tokenizer.ByteLevel.use_regex", "true after a Split");
        LM_ASSIGN_OR_RETURN(t.splitter_,
                            Splitter::make("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                                           "\\s+(?!\\S)|\\s+",
                                           where));
        t.has_splitter_ = true;
      }
      *byte_level = true;
      return absl::OkStatus();
    }
    return bad("pre_tokenizer.type", absl::StrCat("'", type, "' is not implemented (Split, ByteLevel are)"));
  }

  absl::Status pre_tokenizer(const Json& j) {
    bool byte_level = false;
    if (j.is_object() && j.value("type", "") == "Sequence") {
      for (const Json& p : j.value("pretokenizers", Json::array())) LM_RETURN_IF_ERROR(pre_tokenizer_part(p, &byte_level));
    } else if (j.is_object()) {
      LM_RETURN_IF_ERROR(pre_tokenizer_part(j, &byte_level));
    }
    if (!byte_level) return bad("pre_tokenizer", "no ByteLevel step: not a byte-level BPE tokenizer");
    return absl::OkStatus();
  }

  absl::Status model_options(const Json& m) {
    if (m.value("type", "") != "BPE")
      return bad("model.type", absl::StrCat("'", m.value("type", ""), "' is not implemented (BPE is)"));
    auto null_or_empty = [&](const char* key) {
      return !m.contains(key) || m[key].is_null() || (m[key].is_string() && m[key].get<std::string>().empty());
    };
    if (m.contains("dropout") && !m["dropout"].is_null()) return bad("model.dropout", "BPE dropout is not implemented");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (!null_or_empty(key)) return bad(absl::StrCat("model.", key), "not implemented (null expected)");
    if (m.value("byte_fallback", false)) return bad("model.byte_fallback", "not implemented for byte-level BPE");
    t.ignore_merges_ = m.value("ignore_merges", false);
    return absl::OkStatus();
  }

  absl::Status vocab(const Json& m) {
    if (!m.contains("vocab") || !m["vocab"].is_object()) return bad("model.vocab", "an object {token: id} is expected");
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
        return bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"), "a non-negative id is expected");
      const int32_t id = it.value().get<int32_t>();
      set_token(id, it.key(), false);
      by_text[it.key()] = id;
      t.vocab_[t.bytes_[id]] = id;
    }
    t.byte_id_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      std::string s;
      char32_t c = byte_to_unicode()[b];
      int32_t n = 0;
      char buf[4];
      U8_APPEND_UNSAFE(buf, n, c);
      s.assign(buf, n);
      if (auto it = by_text.find(s); it != by_text.end()) t.byte_id_[b] = it->second;
    }
    return absl::OkStatus();
  }

  absl::Status merges(const Json& m) {
    if (!m.contains("merges") || !m["merges"].is_array()) return bad("model.merges", "a list is expected");
    int32_t rank = 0;
    for (const Json& e : m["merges"]) {
      std::string a, b;
      if (e.is_string()) {  // "a b"
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          return bad(absl::StrCat("model.merges[", rank, "]"), absl::StrCat("'", s, "' is not two tokens"));
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
        a = e[0].get<std::string>(), b = e[1].get<std::string>();
      } else {
        return bad(absl::StrCat("model.merges[", rank, "]"), "a string \"a b\" or a pair [\"a\", \"b\"] is expected");
      }
      auto ia = by_text.find(a), ib = by_text.find(b), im = by_text.find(a + b);
      if (ia == by_text.end() || ib == by_text.end() || im == by_text.end())
        return bad(absl::StrCat("model.merges[", rank, "]"),
                   absl::StrCat("'", a, "' + '", b, "' or their merge is not in model.vocab"));
      t.merges_.try_emplace(HfBpe::pair_key(ia->second, ib->second), HfBpe::Merge{rank, im->second});
      ++rank;
    }
    return absl::OkStatus();
  }

  absl::Status added_tokens(const Json& j) {
    for (const Json& a : j) {
      AddedToken tok;
      tok.content = a.value("content", "");
      tok.id = a.value("id", -1);
      tok.special = a.value("special", false);
      tok.lstrip = a.value("lstrip", false);
      tok.rstrip = a.value("rstrip", false);
      if (tok.id < 0 || tok.content.empty()) return bad("added_tokens", "an entry without id or content");
      if (a.value("single_word", false))
        return bad(absl::StrCat("added_tokens[", tok.content, "].single_word"), "true is not implemented");
      set_token(tok.id, tok.content, true);
      t.added_.push_back(tok);
      t.added_first_byte_[static_cast<unsigned char>(tok.content[0])] = true;
    }
    std::stable_sort(t.added_.begin(), t.added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    return absl::OkStatus();
  }

  // TemplateProcessing's `single`: the special tokens around $A (Sequence: every step's).
  absl::Status post_processor(const Json& j) {
    if (j.is_null()) return absl::OkStatus();
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
      for (const Json& p : j.value("processors", Json::array())) LM_RETURN_IF_ERROR(post_processor(p));
      return absl::OkStatus();
    }
    if (type == "ByteLevel") return absl::OkStatus();  // offsets only
    if (type != "TemplateProcessing")
      return bad("post_processor.type", absl::StrCat("'", type, "' is not implemented (TemplateProcessing is)"));
    bool after = false;
    for (const Json& piece : j.value("single", Json::array())) {
      if (piece.contains("Sequence")) {
        after = true;
        continue;
      }
      const std::string name = piece.contains("SpecialToken") ? piece["SpecialToken"].value("id", "") : "";
      const Json& specials = j.value("special_tokens", Json::object());
      if (name.empty() || !specials.contains(name))
        return bad("post_processor.single", absl::StrCat("'", name, "' is not in special_tokens"));
      for (const Json& id : specials[name].value("ids", Json::array()))
        (after ? t.suffix_ : t.prefix_).push_back(id.get<int32_t>());
    }
    return absl::OkStatus();
  }

  absl::Status run(const Json& j) {
    if (!j.is_object() || !j.contains("model")) return bad("model", "missing: not a tokenizer.json");
    LM_RETURN_IF_ERROR(model_options(j["model"]));
    LM_RETURN_IF_ERROR(vocab(j["model"]));
    LM_RETURN_IF_ERROR(merges(j["model"]));
    LM_RETURN_IF_ERROR(added_tokens(j.value("added_tokens", Json::array())));
    LM_RETURN_IF_ERROR(normalizer(j.value("normalizer", Json())));
    LM_RETURN_IF_ERROR(pre_tokenizer(j.value("pre_tokenizer", Json())));
    LM_RETURN_IF_ERROR(post_processor(j.value("post_processor", Json())));
    const Json dec = j.value("decoder", Json());
    if (!dec.is_null() && dec.value("type", "") != "ByteLevel")
      return bad("decoder.type", absl::StrCat("'", dec.value("type", ""), "' is not implemented (ByteLevel is)"));
    for (int32_t id : t.prefix_)
      if (id < 0 || id >= t.vocab_size()) return bad("post_processor", absl::StrCat("id ", id, " is not in the vocabulary"));
    for (int32_t id : t.suffix_)
      if (id < 0 || id >= t.vocab_size()) return bad("post_processor", absl::StrCat("id ", id, " is not in the vocabulary"));
    return absl::OkStatus();
  }
};

absl::StatusOr<std::shared_ptr<const HfBpe>> HfBpe::parse(const std::string& json_text, const std::string& where) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(where, ": not valid JSON (a truncated download?)"));
  static std::atomic<uint64_t> tags{1};
  auto t = std::make_shared<HfBpe>();
  t->cache_tag_ = tags.fetch_add(1) << 1;
  HfJsonParser p{*t, where, {}};
  LM_RETURN_IF_ERROR(p.run(j));
  return std::shared_ptr<const HfBpe>(std::move(t));
}

}  // namespace lm::tokenizer
