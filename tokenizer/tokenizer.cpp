#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/config.h"
#include "core/file.h"

namespace lm::tokenizer {

std::string model_hash(const std::string& bytes) { return hex64(fnv1a64(bytes.data(), bytes.size())); }

absl::StatusOr<Tokenizer> Tokenizer::from_model_bytes(const std::string& bytes, const std::string& where) {
  std::string error;
  auto sp = bridge::load_model(bytes, &error);
  if (!sp)
    return absl::DataLossError(absl::StrCat(where, ": not a valid SentencePiece model (", error,
                                            "); re-run 'lmtrain tokenizer' to rebuild it"));
  Tokenizer t;
  t.sp_ = std::move(sp);
  const bridge::SpInfo i = bridge::info(*t.sp_);
  t.vocab_size_ = t.model_vocab_ = i.vocab_size;
  t.unk_ = i.unk_id;
  t.bos_ = i.bos_id;
  t.eos_ = i.eos_id;
  t.pad_ = i.pad_id;
  t.hash_ = model_hash(bytes);
  if (std::getenv("LM_SPM_PLAIN") == nullptr) t.words_ = SpmWords::make(bytes);  // null for lmforge's own
  return t;
}

absl::StatusOr<Tokenizer> Tokenizer::from_hf_json(const std::string& json_text, const std::string& where,
                                                  int32_t eos_id) {
  LM_ASSIGN_OR_RETURN(std::shared_ptr<const HfBpe> hf, HfBpe::parse(json_text, where));
  Tokenizer t;
  t.type_ = kTypeHfBpe;
  t.vocab_size_ = t.model_vocab_ = hf->vocab_size();
  const auto& prefix = hf->template_prefix();
  t.bos_ = prefix.empty() ? -1 : prefix.front();
  t.framing_ = Framing{!prefix.empty(), true};
  t.eos_ = eos_id;
  t.hf_ = std::move(hf);
  t.hash_ = model_hash(json_text);
  return t;
}

int32_t Tokenizer::model_vocab_size() const { return model_vocab_; }

namespace {

// The ids tokenizer.json records against the model's own: a lmforge model must match them all; an
// imported one may have more embedding rows than ids (vocab_size) and, for hf-bpe, takes the
// special ids from tokenizer.json (the import decided them from the checkpoint's files).
absl::Status check_meta(const TokenizerMeta& meta, const std::string& meta_path, const std::string& model_path,
                        Tokenizer::Ids& got, bool own) {
  auto differ = [&](const char* name, int64_t want, int64_t have) {
    return absl::FailedPreconditionError(absl::StrCat(meta_path, ": ", name, " is ", want, " but ", model_path,
                                                      " has ", have, " (re-run 'lmtrain tokenizer'",
                                                      own ? "" : " --import", ")"));
  };
  if (own ? meta.vocab_size != got.vocab_size : meta.vocab_size < got.model_vocab)
    return differ(own ? "vocab_size" : "vocab_size (at least the model's ids)", meta.vocab_size,
                  own ? got.vocab_size : got.model_vocab);
  if (meta.type == kTypeHfBpe) {
    for (int64_t id : {meta.unk_id, meta.bos_id, meta.eos_id, meta.pad_id})
      if (id < -1 || id >= meta.vocab_size)
        return absl::FailedPreconditionError(absl::StrCat(meta_path, ": special id ", id, " is outside the vocabulary [0, ",
                                                          meta.vocab_size, ")"));
    got.unk = meta.unk_id, got.bos = meta.bos_id, got.eos = meta.eos_id, got.pad = meta.pad_id;
  } else {
    if (meta.unk_id != got.unk) return differ("unk_id", meta.unk_id, got.unk);
    if (meta.bos_id != got.bos) return differ("bos_id", meta.bos_id, got.bos);
    if (meta.eos_id != got.eos) return differ("eos_id", meta.eos_id, got.eos);
    if (meta.pad_id != got.pad) return differ("pad_id", meta.pad_id, got.pad);
  }
  got.vocab_size = static_cast<int32_t>(meta.vocab_size);
  if (got.eos < 0)
    return absl::FailedPreconditionError(absl::StrCat(meta_path, ": eos_id: none, but documents are split at EOS"));
  if (meta.framing.bos && got.bos < 0)
    return absl::FailedPreconditionError(absl::StrCat(meta_path, ": framing.bos: true but bos_id is ", got.bos,
                                                      " (set framing.bos to false or name a BOS id)"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::load(const std::string& dir) {
  const std::string meta_path = dir + "/" + kMetaFile;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::NotFoundError(absl::StrCat(dir, ": no such tokenizer folder (train one with 'lmtrain tokenizer')"));
  if (::stat(meta_path.c_str(), &st) != 0 && ::stat((dir + "/" + kModelFile).c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(dir, "/", kModelFile, ": missing (a tokenizer folder holds ", kModelFile,
                                            " and ", kMetaFile, "; re-run 'lmtrain tokenizer')"));
  TokenizerMeta meta;
  LM_RETURN_IF_ERROR(load_config_file(meta_path, meta));
  const std::string model_path = dir + "/" + meta.model_file;
  const bool own = meta.model_file == kModelFile;
  if (meta.type != kTypeSentencePiece && meta.type != kTypeHfBpe)
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": type: '", meta.type, "' is not ", kTypeSentencePiece,
                                                   " or ", kTypeHfBpe));
  if (::stat(model_path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(model_path, ": missing (a tokenizer folder holds ", meta.model_file, " and ",
                                            kMetaFile, "; re-run 'lmtrain tokenizer'", own ? "" : " --import", ")"));
  LM_ASSIGN_OR_RETURN(std::string bytes, read_file(model_path));
  absl::StatusOr<Tokenizer> loaded = meta.type == kTypeHfBpe
                                         ? from_hf_json(bytes, model_path, static_cast<int32_t>(meta.eos_id))
                                         : from_model_bytes(bytes, model_path);
  LM_ASSIGN_OR_RETURN(Tokenizer t, std::move(loaded));
  t.dir_ = dir;
  if (!meta.hash.empty() && meta.hash != t.hash_)
    return absl::FailedPreconditionError(absl::StrCat(model_path, ": content hash ", t.hash_, " differs from ",
                                                      meta_path, " (hash ", meta.hash, "); the model was replaced: ",
                                                      own ? "re-run 'lmtrain tokenizer'" : "import it again"));
  Ids ids{t.unk_, t.bos_, t.eos_, t.pad_, t.vocab_size_, t.model_vocab_};
  LM_RETURN_IF_ERROR(check_meta(meta, meta_path, model_path, ids, own));
  t.unk_ = ids.unk, t.bos_ = ids.bos, t.eos_ = ids.eos, t.pad_ = ids.pad, t.vocab_size_ = ids.vocab_size;
  if (!meta.framing.eos)
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": framing.eos: false, but documents are split at EOS "
                                                   "(nll, the shards' document count); set it to true"));
  t.framing_ = meta.framing;
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  if (hf_) hf_->encode(text, &ids);
  else if (words_) words_->encode(text, &ids);
  else if (sp_) bridge::encode(*sp_, text, &ids);
  return ids;
}

std::vector<int32_t> Tokenizer::frame(const std::vector<int32_t>& text_ids) const {
  std::vector<int32_t> doc;
  doc.reserve(text_ids.size() + 2);
  if (framing_.bos) doc.push_back(bos_);
  doc.insert(doc.end(), text_ids.begin(), text_ids.end());
  if (framing_.eos) doc.push_back(eos_);
  return doc;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          int threads) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n = static_cast<int>(std::min<size_t>(n, std::max<size_t>(1, texts.size() / 8)));
  if (n <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) out[i] = encode(texts[i]);
    return out;
  }
  // Interleaved assignment balances long and short documents without a queue.
  std::vector<std::thread> pool;
  for (int w = 0; w < n; ++w)
    pool.emplace_back([&, w] {
      for (size_t i = w; i < texts.size(); i += n) out[i] = encode(texts[i]);
    });
  for (auto& t : pool) t.join();
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (hf_) return hf_->decode(ids);
  return sp_ ? bridge::decode(*sp_, ids) : std::string();
}

// Byte-level BPE pieces are bytes by construction, not a fallback: none counts as one.
bool Tokenizer::is_byte(int32_t id) const { return sp_ && id >= 0 && id < model_vocab_ && bridge::is_byte(*sp_, id); }

std::string Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= model_vocab_) return std::string();
  if (hf_) return hf_->token(id);
  return sp_ ? bridge::id_to_piece(*sp_, id) : std::string();
}

}  // namespace lm::tokenizer
