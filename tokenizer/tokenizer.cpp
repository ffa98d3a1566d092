#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
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
  t.vocab_size_ = i.vocab_size;
  t.unk_ = i.unk_id;
  t.bos_ = i.bos_id;
  t.eos_ = i.eos_id;
  t.pad_ = i.pad_id;
  t.hash_ = model_hash(bytes);
  return t;
}

absl::StatusOr<Tokenizer> Tokenizer::load(const std::string& dir) {
  const std::string meta_path = dir + "/" + kMetaFile;
  const std::string model_path = dir + "/" + kModelFile;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::NotFoundError(absl::StrCat(dir, ": no such tokenizer folder (train one with 'lmtrain tokenizer')"));
  if (::stat(model_path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(model_path, ": missing (a tokenizer folder holds ", kModelFile, " and ",
                                            kMetaFile, "; re-run 'lmtrain tokenizer')"));
  TokenizerMeta meta;
  LM_RETURN_IF_ERROR(load_config_file(meta_path, meta));
  LM_ASSIGN_OR_RETURN(std::string bytes, read_file(model_path));
  LM_ASSIGN_OR_RETURN(Tokenizer t, from_model_bytes(bytes, model_path));
  t.dir_ = dir;
  if (!meta.hash.empty() && meta.hash != t.hash_)
    return absl::FailedPreconditionError(absl::StrCat(model_path, ": content hash ", t.hash_, " differs from ",
                                                      meta_path, " (hash ", meta.hash,
                                                      "); the model was replaced: re-run 'lmtrain tokenizer'"));
  auto check = [&](const char* name, int64_t want, int32_t got) -> absl::Status {
    if (want == got) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(meta_path, ": ", name, " is ", want, " but ", model_path,
                                                      " has ", got, " (re-run 'lmtrain tokenizer')"));
  };
  LM_RETURN_IF_ERROR(check("vocab_size", meta.vocab_size, t.vocab_size_));
  LM_RETURN_IF_ERROR(check("unk_id", meta.unk_id, t.unk_));
  LM_RETURN_IF_ERROR(check("bos_id", meta.bos_id, t.bos_));
  LM_RETURN_IF_ERROR(check("eos_id", meta.eos_id, t.eos_));
  LM_RETURN_IF_ERROR(check("pad_id", meta.pad_id, t.pad_));
  if (!meta.framing.eos)
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": framing.eos: false, but documents are split at EOS "
                                                   "(nll, the shards' document count); set it to true"));
  t.framing_ = meta.framing;
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  if (sp_) bridge::encode(*sp_, text, &ids);
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
  return sp_ ? bridge::decode(*sp_, ids) : std::string();
}

bool Tokenizer::is_byte(int32_t id) const { return sp_ && id >= 0 && id < vocab_size_ && bridge::is_byte(*sp_, id); }

std::string Tokenizer::piece(int32_t id) const {
  return sp_ && id >= 0 && id < vocab_size_ ? bridge::id_to_piece(*sp_, id) : std::string();
}

}  // namespace lm::tokenizer
