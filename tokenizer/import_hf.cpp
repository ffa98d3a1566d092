#include "tokenizer/import_hf.h"

#include <sys/stat.h>

#include <cerrno>

#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "tokenizer/normalize.h"

namespace lm::tokenizer {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// An optional JSON file of the checkpoint: null when absent, an error when it does not parse.
absl::StatusOr<Json> read_optional_json(const std::string& path) {
  if (!exists(path)) return Json();
  LM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return absl::DataLossError(absl::StrCat(path, ": not a JSON object (a truncated download?)"));
  return j;
}

// tokenizer_config.json names tokens as a string or as {"content": ...}.
std::string token_text(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// config.json's eos_token_id: an id or a list of them (the first is the document end).
int64_t config_id(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return -1;
  const Json& v = config[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
  return -1;
}

struct Checkpoint {
  std::string dir;
  Json config, tok_config;
  std::string file(const char* name) const { return dir + "/" + name; }
};

// The HF tokenizer.json's ids: BOS from the template, EOS and PAD from tokenizer_config.json.
absl::Status hf_ids(const Checkpoint& c, const Tokenizer& t, TokenizerMeta& meta) {
  const HfBpe& hf = *t.hf();
  auto id_of = [&](const char* key) -> absl::StatusOr<int64_t> {
    const std::string text = token_text(c.tok_config, key);
    if (text.empty()) return -1;
    const int32_t id = hf.token_id(text);
    if (id < 0)
      return absl::InvalidArgumentError(absl::StrCat(c.file("tokenizer_config.json"), ": ", key, ": '", text,
                                                     "' is not a token of ", c.file("tokenizer.json")));
    return id;
  };
  LM_ASSIGN_OR_RETURN(meta.eos_id, id_of("eos_token"));
  if (meta.eos_id < 0) meta.eos_id = config_id(c.config, "eos_token_id");
  if (meta.eos_id < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        c.dir, ": no EOS: neither tokenizer_config.json eos_token nor config.json eos_token_id names one "
               "(every document ends with it; add eos_token to tokenizer_config.json)"));
  meta.framing = Framing{!hf.template_prefix().empty(), true};
  if (meta.framing.bos) {
    meta.bos_id = hf.template_prefix().front();
  } else {
    LM_ASSIGN_OR_RETURN(meta.bos_id, id_of("bos_token"));
  }
  LM_ASSIGN_OR_RETURN(meta.pad_id, id_of("pad_token"));
  LM_ASSIGN_OR_RETURN(meta.unk_id, id_of("unk_token"));
  meta.normalization = absl::StrCat("the checkpoint's own (", hf.normalizer(), ")");
  return absl::OkStatus();
}

// Which of the checkpoint's files to read: tokenizer.json when it is byte-level BPE, else
// tokenizer.model (Llama 2 ships both; its tokenizer.json is not byte-level).
absl::StatusOr<Tokenizer> open_model(const Checkpoint& c, std::string* bytes, std::string* file) {
  absl::Status json_error = absl::OkStatus();
  if (exists(c.file("tokenizer.json"))) {
    LM_ASSIGN_OR_RETURN(*bytes, read_file(c.file("tokenizer.json")));
    auto t = Tokenizer::from_hf_json(*bytes, c.file("tokenizer.json"), -1);
    if (t.ok() || !exists(c.file("tokenizer.model"))) {
      *file = "tokenizer.json";
      return t;
    }
    json_error = t.status();
  }
  if (!exists(c.file("tokenizer.model")))
    return absl::NotFoundError(absl::StrCat(c.dir, ": no tokenizer.json or tokenizer.model (an HF checkpoint "
                                                   "folder holds one of them; download the tokenizer files too)"));
  if (!json_error.ok()) log_detail("import: %s; reading tokenizer.model instead", std::string(json_error.message()));
  LM_ASSIGN_OR_RETURN(*bytes, read_file(c.file("tokenizer.model")));
  *file = "tokenizer.model";
  return Tokenizer::from_model_bytes(*bytes, c.file("tokenizer.model"));
}

absl::StatusOr<TokenizerMeta> make_meta(const Checkpoint& c, const Tokenizer& t, const std::string& file) {
  TokenizerMeta meta;
  meta.type = t.type();
  meta.hash = t.hash();
  meta.source = c.file(file.c_str());
  meta.icu_version = icu_version();
  if (t.hf()) {
    meta.model_type = "bpe (byte-level)";
    meta.model_file = kHfJsonFile;
    LM_RETURN_IF_ERROR(hf_ids(c, t, meta));
  } else {
    meta.model_type = "the model's own";
    meta.model_file = kForeignSpmFile;
    meta.unk_id = t.unk_id(), meta.bos_id = t.bos_id(), meta.eos_id = t.eos_id(), meta.pad_id = t.pad_id();
    const bool add_bos = !c.tok_config.is_object() || c.tok_config.value("add_bos_token", true);
    meta.framing = Framing{add_bos && t.bos_id() >= 0, true};
    meta.normalization = "the model's own (SentencePiece normalizer in tokenizer.model)";
  }
  meta.vocab_size = t.model_vocab_size();
  if (c.config.is_object() && c.config.contains("vocab_size")) {
    const int64_t rows = c.config.value("vocab_size", int64_t{0});
    if (rows < t.model_vocab_size())
      return absl::FailedPreconditionError(absl::StrCat(
          c.file("config.json"), ": vocab_size is ", rows, " but ", c.file(file.c_str()), " has ids up to ",
          t.model_vocab_size() - 1, " (the tokenizer does not belong to this checkpoint)"));
    meta.vocab_size = rows;
  }
  return meta;
}

}  // namespace

absl::StatusOr<Tokenizer> import_hf_tokenizer(const ImportOptions& o) {
  struct stat st;
  if (::stat(o.hf_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::NotFoundError(absl::StrCat(o.hf_dir, ": no such folder (an HF checkpoint folder is expected)"));
  Checkpoint c{o.hf_dir, {}, {}};
  LM_ASSIGN_OR_RETURN(c.config, read_optional_json(c.file("config.json")));
  LM_ASSIGN_OR_RETURN(c.tok_config, read_optional_json(c.file("tokenizer_config.json")));
  std::string bytes, file;
  LM_ASSIGN_OR_RETURN(Tokenizer t, open_model(c, &bytes, &file));
  LM_ASSIGN_OR_RETURN(TokenizerMeta meta, make_meta(c, t, file));
  // Everything is checked before the folder is touched: a refused import writes nothing.
  LM_RETURN_IF_ERROR(check_new_output(o.out, o.force, "a tokenizer"));
  for (size_t i = 1; i <= o.out.size(); ++i)  // the folder and its parents
    if ((i == o.out.size() || o.out[i] == '/') && ::mkdir(o.out.substr(0, i).c_str(), 0755) != 0 && errno != EEXIST)
      return errno_status("mkdir", o.out.substr(0, i));
  LM_RETURN_IF_ERROR(write_file_atomic(o.out + "/" + meta.model_file, bytes));
  Json j = to_json(meta);
  j.erase("recipe");  // a training recipe and sample describe lmforge's own tokenizers only
  j.erase("training");
  LM_RETURN_IF_ERROR(write_json_file(o.out + "/" + kMetaFile, j));
  return Tokenizer::load(o.out);
}

}  // namespace lm::tokenizer
