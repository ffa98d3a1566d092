#include "model/vocab_extension.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <torch/torch.h>

#include "absl/strings/str_join.h"
#include "core/config.h"
#include "core/file.h"
#include "model/hf_import.h"
#include "model/safetensors.h"

namespace lm::model {
namespace fs = std::filesystem;
namespace {

absl::Status bad_field(const std::string& src, const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(src, ": ", field, ": ", why,
                                                 " (write it with 'lmtrain tokenizer --extend')"));
}

absl::StatusOr<int64_t> int_field(const Json& j, const char* key, const std::string& src, const std::string& pre = "") {
  if (!j.contains(key) || !j[key].is_number_integer()) return bad_field(src, pre + key, "missing or not an integer");
  return j[key].get<int64_t>();
}

absl::StatusOr<VocabExtension::Token> read_token(const Json& t, const VocabExtension& ext, const std::string& src,
                                                 size_t i) {
  const std::string pre = absl::StrCat("new_tokens[", i, "].");
  if (!t.is_object()) return bad_field(src, pre.substr(0, pre.size() - 1), "expected an object");
  VocabExtension::Token tok;
  LM_ASSIGN_OR_RETURN(tok.id, int_field(t, "id", src, pre));
  if (tok.id < ext.base_vocab_size || tok.id >= ext.vocab_size)
    return bad_field(src, pre + "id", absl::StrCat(tok.id, " is outside the new rows [", ext.base_vocab_size, ", ",
                                                   ext.vocab_size, ")"));
  if (t.contains("token") && t["token"].is_string()) tok.token = t["token"].get<std::string>();
  if (!t.contains("base_pieces") || !t["base_pieces"].is_array())
    return bad_field(src, pre + "base_pieces", "missing or not an array");
  for (const auto& p : t["base_pieces"]) {
    if (!p.is_number_integer() || p.get<int64_t>() < 0 || p.get<int64_t>() >= ext.base_vocab_size)
      return bad_field(src, pre + "base_pieces", absl::StrCat(p.dump(), " is not a base id in [0, ", ext.base_vocab_size, ")"));
    tok.base_pieces.push_back(p.get<int64_t>());
  }
  return tok;
}

}  // namespace

absl::StatusOr<VocabExtension> read_vocab_extension(const std::string& path) {
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  if (!j.is_object() || j.value("format", "") != kVocabExtensionFormat)
    return bad_field(path, "format", absl::StrCat("expected \"", kVocabExtensionFormat, "\""));
  VocabExtension ext;
  if (!j.contains("base_tokenizer_hash") || !j["base_tokenizer_hash"].is_string())
    return bad_field(path, "base_tokenizer_hash", "missing or not a string");
  ext.base_tokenizer_hash = j["base_tokenizer_hash"].get<std::string>();
  ext.split = j.value("split", "");
  LM_ASSIGN_OR_RETURN(ext.base_vocab_size, int_field(j, "base_vocab_size", path));
  LM_ASSIGN_OR_RETURN(ext.vocab_size, int_field(j, "vocab_size", path));
  if (ext.base_vocab_size <= 0 || ext.vocab_size <= ext.base_vocab_size)
    return bad_field(path, "vocab_size", absl::StrCat(ext.vocab_size, " must exceed base_vocab_size ", ext.base_vocab_size));
  if (!j.contains("new_tokens") || !j["new_tokens"].is_array()) return bad_field(path, "new_tokens", "missing or not an array");
  std::set<int64_t> seen;
  for (size_t i = 0; i < j["new_tokens"].size(); ++i) {
    LM_ASSIGN_OR_RETURN(auto tok, read_token(j["new_tokens"][i], ext, path, i));
    if (!seen.insert(tok.id).second) return bad_field(path, absl::StrCat("new_tokens[", i, "].id"), absl::StrCat(tok.id, " given twice"));
    ext.new_tokens.push_back(std::move(tok));
  }
  return ext;
}

namespace {

// ---- New rows ----------------------------------------------------------------------------------

// The old rows' mean in fp64, over chunks of rows (a large matrix is never converted whole).
constexpr int64_t kChunkRows = 8192;
torch::Tensor row_mean(const torch::Tensor& old) {
  const int64_t n = old.size(0);
  auto sum = torch::zeros({old.size(1)}, torch::kFloat64);
  for (int64_t i = 0; i < n; i += kChunkRows) sum += old.narrow(0, i, std::min(kChunkRows, n - i)).to(torch::kFloat64).sum(0);
  return sum / static_cast<double>(n);
}

// transformers' mean_resizing fallback (modeling_utils._init_added_embeddings_weights_with_mean):
// rows drawn from N(mean, 1e-9 * cov) of the old rows, cov = C^T C / n with C the centred rows, or
// the mean where 1e-9 * cov is not positive definite. Cov is singular when n <= d: the mean then.
// For fewer draws than d (the usual case: a few special tokens without pieces) a draw is
// mean + sqrt(1e-9 / n) C^T w with w ~ N(0, I_n), the same normal without the d x d covariance
// (n d work per draw instead of n d^2: seconds instead of minutes for a 1B model); else
// mean + L z with L L^T = 1e-9 cov (Cholesky), as transformers' MultivariateNormal draws.
torch::Tensor fallback_rows(const torch::Tensor& old, int64_t count, uint64_t seed, bool* pd) {
  const int64_t n = old.size(0), d = old.size(1);
  const auto mean = row_mean(old);
  *pd = n > d;
  if (!*pd) return mean.to(torch::kFloat32).unsqueeze(0).expand({count, d}).contiguous();
  torch::manual_seed(seed);
  const bool direct = count < d;
  auto acc = torch::zeros(direct ? std::vector<int64_t>{count, d} : std::vector<int64_t>{d, d}, torch::kFloat64);
  for (int64_t i = 0; i < n; i += kChunkRows) {
    const auto c = old.narrow(0, i, std::min(kChunkRows, n - i)).to(torch::kFloat64) - mean;  // [rows, d]
    if (direct) acc.addmm_(torch::randn({count, c.size(0)}, torch::kFloat64), c);  // += w C
    else acc.addmm_(c.t(), c);                                                      // += C^T C
  }
  if (direct) return (mean + acc * std::sqrt(1e-9 / static_cast<double>(n))).to(torch::kFloat32);
  auto [chol, info] = torch::linalg_cholesky_ex(acc * (1e-9 / static_cast<double>(n)));
  *pd = info.item<int64_t>() == 0;
  if (!*pd) return mean.to(torch::kFloat32).unsqueeze(0).expand({count, d}).contiguous();
  const auto z = torch::randn({count, d}, torch::kFloat64);
  return (mean + z.matmul(chol.t())).to(torch::kFloat32);
}

struct GrownRows {
  torch::Tensor rows;  // [vocab - base, d] in the stored dtype
  int64_t from_pieces = 0, from_normal = 0;
  bool pd = true;
};

// The new rows of one [base, d] matrix (`old`, as stored): each listed token's pieces' mean in
// fp32, every other new row (no pieces, or an id the extension leaves out) the fallback.
GrownRows grow_rows(const torch::Tensor& old, const VocabExtension& ext, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const int64_t added = ext.vocab_size - ext.base_vocab_size, d = old.size(1);
  auto rows = torch::empty({added, d}, torch::kFloat32);
  std::vector<bool> set(added, false);
  GrownRows g;
  for (const auto& t : ext.new_tokens) {
    if (t.base_pieces.empty()) continue;
    const auto idx = torch::tensor(t.base_pieces, torch::kInt64);
    rows[t.id - ext.base_vocab_size].copy_(old.index_select(0, idx).to(torch::kFloat32).mean(0));
    set[t.id - ext.base_vocab_size] = true;
    ++g.from_pieces;
  }
  std::vector<int64_t> rest;
  for (int64_t i = 0; i < added; ++i) if (!set[i]) rest.push_back(i);
  if (!rest.empty()) {
    const auto drawn = fallback_rows(old, static_cast<int64_t>(rest.size()), seed, &g.pd);
    rows.index_copy_(0, torch::tensor(rest, torch::kInt64), drawn);
    g.from_normal = static_cast<int64_t>(rest.size());
  }
  g.rows = rows.to(old.scalar_type()).contiguous();
  return g;
}

// ---- Streaming safetensors -----------------------------------------------------------------------

bool is_vocab_matrix(const std::string& name) { return name == "model.embed_tokens.weight" || name == "lm_head.weight"; }

absl::Status write_all(std::FILE* f, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  constexpr size_t kChunk = size_t{64} << 20;
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kChunk, size - done);
    if (std::fwrite(p + done, 1, n, f) != n) return errno_status("write", path, "nothing was written to --out");
    done += n;
  }
  return absl::OkStatus();
}

// The header of `src` with each grown tensor's rows raised to `vocab`, offsets in the data order
// of `src`. Returns the header bytes (8-byte length, JSON padded to 8) and the data size.
std::pair<std::string, int64_t> grown_header(const MappedSafetensors& src, const std::vector<const SafetensorsEntry*>& order,
                                             const std::map<std::string, GrownRows>& grown) {
  Json header = Json::object();
  if (!src.metadata().empty()) header["__metadata__"] = src.metadata();
  int64_t offset = 0;
  for (const auto* e : order) {
    std::vector<int64_t> shape = e->shape;
    int64_t bytes = e->end - e->begin;
    if (auto it = grown.find(e->name); it != grown.end()) {
      shape[0] += it->second.rows.size(0);
      bytes += it->second.rows.numel() * it->second.rows.element_size();
    }
    header[e->name] = {{"dtype", safetensors_dtype_name(e->dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(h.size()) >> (8 * i)) & 0xff);
  return {out + h, offset};
}

// Writes `src` to `path` with the grown tensors' new rows after their old bytes; every byte of
// the old data is copied out of the mapping and its pages released after each tensor. Returns the
// tensor bytes written (the index's total_size counts those).
absl::StatusOr<int64_t> write_grown(const MappedSafetensors& src, const std::string& path,
                                    const std::map<std::string, GrownRows>& grown) {
  std::vector<const SafetensorsEntry*> order;
  for (const auto& e : src.entries()) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
  const auto [header, data_bytes] = grown_header(src, order, grown);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return errno_status("open", path, "nothing was written to --out");
  absl::Status st = write_all(f, header.data(), header.size(), path);
  for (size_t i = 0; st.ok() && i < order.size(); ++i) {
    const SafetensorsEntry& e = *order[i];
    if (e.end > e.begin) st = write_all(f, src.view(e).data_ptr(), static_cast<size_t>(e.end - e.begin), path);
    src.release(e);
    if (auto it = grown.find(e.name); st.ok() && it != grown.end())
      st = write_all(f, it->second.rows.data_ptr(), it->second.rows.numel() * it->second.rows.element_size(), path);
  }
  if (st.ok() && (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0)) st = errno_status("fsync", path, "nothing was written to --out");
  if (std::fclose(f) != 0 && st.ok()) st = errno_status("close", path, "nothing was written to --out");
  LM_RETURN_IF_ERROR(st);
  return data_bytes;
}

// ---- The checks before anything is written ------------------------------------------------------

absl::Status check_base(const ExtendModelOptions& o, const Json& config, const VocabExtension& ext,
                        const std::string& ext_path) {
  const std::string cfg = (fs::path(o.hf_dir) / "config.json").string();
  std::error_code ec;
  if (fs::exists(fs::path(o.hf_dir) / kVocabExtensionFile, ec))
    return absl::FailedPreconditionError(absl::StrCat(
        o.hf_dir, ": already extended (it holds ", kVocabExtensionFile,
        " from 'lmtrain extend-model'); extend the base checkpoint instead, with a tokenizer extended from its own"));
  const int64_t rows = config.value("vocab_size", int64_t{0});
  if (rows == ext.vocab_size)
    return absl::FailedPreconditionError(absl::StrCat(cfg, ": vocab_size is already ", rows, ", the extended size of ",
                                                      ext_path, " (already extended? extend the base checkpoint)"));
  if (rows != ext.base_vocab_size)
    return absl::FailedPreconditionError(absl::StrCat(
        ext_path, ": base_vocab_size is ", ext.base_vocab_size, " but ", cfg, " has vocab_size ", rows,
        " (the tokenizer was extended from another checkpoint's; run 'lmtrain tokenizer --import' on this one and extend that)"));
  if (!o.base_tokenizer_hash.empty() && o.base_tokenizer_hash != ext.base_tokenizer_hash)
    return absl::FailedPreconditionError(absl::StrCat(
        ext_path, ": base_tokenizer_hash is ", ext.base_tokenizer_hash, " but ", o.hf_dir, "'s own tokenizer hashes to ",
        o.base_tokenizer_hash, " (the tokenizer is not an extension of this checkpoint's; extend 'lmtrain tokenizer --import ",
        o.hf_dir, "')"));
  return absl::OkStatus();
}

absl::Status check_out(const ExtendModelOptions& o) {
  std::error_code ec;
  if (fs::exists(o.out, ec) && fs::equivalent(o.out, o.hf_dir, ec))
    return absl::InvalidArgumentError(absl::StrCat("--out ", o.out, " is the base checkpoint itself (write a new folder)"));
  if (fs::exists(o.out, ec) && !fs::is_directory(o.out, ec))
    return absl::AlreadyExistsError(absl::StrCat(o.out, ": exists and is not a folder"));
  return check_new_output(o.out, o.force, "a checkpoint");
}

// ---- The folder -------------------------------------------------------------------------------------

absl::Status copy_bytes(const fs::path& from, const fs::path& to) {
  LM_ASSIGN_OR_RETURN(std::string bytes, read_file(from.string()));
  return write_file_atomic(to.string(), bytes);
}

// config.json with the new vocab_size; the index with its new total_size; the tokenizer files.
absl::Status write_side_files(const ExtendModelOptions& o, Json config, const VocabExtension& ext,
                              const HfWeights& ws, int64_t total_bytes, const fs::path& tmp) {
  config["vocab_size"] = ext.vocab_size;
  LM_RETURN_IF_ERROR(write_file_atomic((tmp / "config.json").string(), config.dump(2) + "\n"));
  if (!ws.index.empty()) {
    LM_ASSIGN_OR_RETURN(Json index, read_json_file(ws.index));
    index["metadata"]["total_size"] = total_bytes;
    LM_RETURN_IF_ERROR(write_file_atomic((tmp / fs::path(ws.index).filename()).string(), index.dump(2) + "\n"));
  }
  const fs::path tok(o.tokenizer_dir), base(o.hf_dir);
  std::error_code ec;
  // The extended tokenizer in the file an HF folder holds it in: a byte-level BPE as tokenizer.json,
  // a SentencePiece base's (Llama 2) as tokenizer.model; the base's other tokenizer file (Llama 2's
  // tokenizer.json) is not copied, since it would name the old vocabulary.
  if (fs::exists(tok / "hf-tokenizer.json", ec)) {
    LM_RETURN_IF_ERROR(copy_bytes(tok / "hf-tokenizer.json", tmp / "tokenizer.json"));
  } else if (fs::exists(tok / "tokenizer.model", ec)) {
    LM_RETURN_IF_ERROR(copy_bytes(tok / "tokenizer.model", tmp / "tokenizer.model"));
  } else {
    return absl::NotFoundError(absl::StrCat(o.tokenizer_dir, ": no hf-tokenizer.json or tokenizer.model (the extended "
                                            "tokenizer that 'lmtrain tokenizer --extend' writes)"));
  }
  LM_RETURN_IF_ERROR(copy_bytes(tok / kVocabExtensionFile, tmp / kVocabExtensionFile));
  for (const char* f : {"tokenizer_config.json", "generation_config.json", "special_tokens_map.json"})
    if (fs::exists(base / f, ec)) LM_RETURN_IF_ERROR(copy_bytes(base / f, tmp / f));
  return absl::OkStatus();
}

// tmp -> out; with force an old `out` is moved aside first and removed once the new one is in place.
absl::Status move_into_place(const std::string& tmp, const std::string& out) {
  LM_RETURN_IF_ERROR(fsync_tree(tmp));
  std::error_code ec;
  const std::string old = absl::StrCat(out, ".old-", ::getpid());
  const bool replace = fs::exists(out, ec);
  if (replace && std::rename(out.c_str(), old.c_str()) != 0) return errno_status("rename", out, "the old folder is intact");
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    const auto st = errno_status("rename", tmp, "the base checkpoint is intact");
    if (replace) std::rename(old.c_str(), out.c_str());
    return st;
  }
  if (replace) LM_RETURN_IF_ERROR(remove_tree(old));
  return fsync_dir(fs::absolute(out).parent_path().string());
}

// The grown matrices of one weight file, and the report's counts.
std::map<std::string, GrownRows> grow_file(const MappedSafetensors& f, const VocabExtension& ext, uint64_t seed,
                                           ExtendModelReport& r, std::set<std::string>& dtypes) {
  std::map<std::string, GrownRows> grown;
  for (const auto& e : f.entries()) {
    if (!is_vocab_matrix(e.name)) continue;
    GrownRows g = grow_rows(f.view(e), ext, seed);
    f.release(e);  // its pages are read again (page cache) when written
    r.from_pieces = g.from_pieces;
    r.from_normal = g.from_normal;
    r.covariance_pd = r.covariance_pd && g.pd;
    r.grown.push_back(e.name);
    dtypes.insert(safetensors_dtype_name(e.dtype));
    grown.emplace(e.name, std::move(g));
  }
  return grown;
}

absl::Status check_shapes(const HfWeights& ws, const VocabExtension& ext, bool tied) {
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    auto it = ws.where.find(name);
    if (it == ws.where.end()) {
      if (std::string(name) == "lm_head.weight" && tied) continue;
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint has no ", name));
    }
    const SafetensorsEntry& e = *it->second.second;
    if (e.shape.size() != 2 || e.shape[0] != ext.base_vocab_size)
      return absl::FailedPreconditionError(absl::StrCat(ws.files[it->second.first].path(), ": ", name, " has ",
                                                        e.shape.empty() ? 0 : e.shape[0], " rows, not base_vocab_size ",
                                                        ext.base_vocab_size, " (weights and config.json disagree)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExtendModelReport> extend_hf_model(const ExtendModelOptions& o) {
  const std::string ext_path = (fs::path(o.tokenizer_dir) / kVocabExtensionFile).string();
  LM_ASSIGN_OR_RETURN(VocabExtension ext, read_vocab_extension(ext_path));
  LM_ASSIGN_OR_RETURN(ModelConfig mc, read_hf_config(o.hf_dir));  // an architecture lmforge imports
  LM_ASSIGN_OR_RETURN(Json config, read_json_file((fs::path(o.hf_dir) / "config.json").string()));
  LM_RETURN_IF_ERROR(check_base(o, config, ext, ext_path));
  LM_RETURN_IF_ERROR(check_out(o));
  LM_ASSIGN_OR_RETURN(HfWeights ws, open_hf_weights(o.hf_dir));
  LM_RETURN_IF_ERROR(check_shapes(ws, ext, mc.tie_embeddings));
  const std::string tmp = absl::StrCat(o.out, ".partial-", ::getpid());
  LM_RETURN_IF_ERROR(remove_tree(tmp));
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": cannot create the folder: ", ec.message()));
  ExtendModelReport r;
  r.base_vocab_size = ext.base_vocab_size;
  r.vocab_size = ext.vocab_size;
  std::set<std::string> dtypes;
  absl::Status st;
  for (const auto& f : ws.files) {
    const auto grown = grow_file(f, ext, o.seed, r, dtypes);
    auto bytes = write_grown(f, (fs::path(tmp) / fs::path(f.path()).filename()).string(), grown);
    if (!bytes.ok()) { st = bytes.status(); break; }
    r.bytes_written += *bytes;
  }
  if (st.ok()) st = write_side_files(o, config, ext, ws, r.bytes_written, tmp);
  if (st.ok()) st = move_into_place(tmp, o.out);
  if (!st.ok()) {
    (void)remove_tree(tmp);
    return st;
  }
  r.dtypes = absl::StrJoin(dtypes, ", ");
  return r;
}

}  // namespace lm::model
