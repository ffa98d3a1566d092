#include "train/sharded_checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/run_folder.h"

namespace lm::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexFormat = "lmforge-optimizer-index/1";
constexpr const char* kMoments[] = {"exp_avg", "exp_avg_sq"};

std::string record_name(int rank, int world) {
  return absl::StrFormat("optimizer.rank-%05d-of-%05d.json", rank, world);
}

// The record a rank writes beside its file: what rank 0 needs for the index and the manifest.
Json shard_record(int rank, int world, const std::vector<AdamW::MomentPart>& parts, uint64_t bytes, uint32_t crc) {
  Json list = Json::array();
  for (const auto& p : parts)
    list.push_back({{"name", p.name}, {"shape", p.shape}, {"begin", p.begin}, {"len", p.len}});
  return {{"rank", rank}, {"world_size", world}, {"file", optimizer_rank_file(rank, world)},
          {"bytes", bytes}, {"crc32", crc}, {"parts", list}};
}

// One rank's record, checked against what rank 0 expects of it.
absl::StatusOr<Json> read_record(const std::string& parts_dir, int rank, int world) {
  const std::string path = (fs::path(parts_dir) / record_name(rank, world)).string();
  LM_ASSIGN_OR_RETURN(Json r, read_json_file(path));
  if (r.value("rank", -1) != rank || r.value("world_size", -1) != world || !r["parts"].is_array() ||
      !r["bytes"].is_number_unsigned() || !r["crc32"].is_number_unsigned())
    return absl::DataLossError(absl::StrCat(path, ": not rank ", rank, " of ", world,
                                            "'s optimizer record (fields rank, world_size, bytes, crc32, parts)"));
  return r;
}

// The index's "params" from every rank's record: names and shapes as rank 0 lists them, each
// rank's non-empty parts in rank order.
absl::StatusOr<Json> index_params(const std::vector<Json>& records) {
  Json params = Json::array();
  std::map<std::string, size_t> at;
  for (const auto& p : records.front()["parts"]) {
    at[p["name"].get<std::string>()] = params.size();
    params.push_back({{"name", p["name"]}, {"shape", p["shape"]}, {"parts", Json::array()}});
  }
  for (const auto& r : records) {
    for (const auto& p : r["parts"]) {
      const std::string name = p["name"].get<std::string>();
      auto it = at.find(name);
      if (it == at.end())
        return absl::DataLossError(absl::StrCat(r["file"].get<std::string>(), ": parameter ", name,
                                                " that rank 0 does not have (the ranks trained different models?)"));
      if (p["len"].get<int64_t>() == 0) continue;
      params[it->second]["parts"].push_back({{"rank", r["rank"]}, {"begin", p["begin"]}, {"len", p["len"]},
                                             {"file", r["file"]},
                                             {"tensors", {name + ".exp_avg", name + ".exp_avg_sq"}}});
    }
  }
  return params;
}

}  // namespace

std::string optimizer_rank_file(int rank, int world) {
  return absl::StrFormat("optimizer.rank-%05d-of-%05d.safetensors", rank, world);
}

std::string checkpoint_parts_dir(const std::string& run_dir, int64_t step) {
  return RunFolder(run_dir).checkpoint(step) + ".parts";
}

absl::Status write_optimizer_shard(const std::string& parts_dir, int rank, int world, const AdamW& optim) {
  std::error_code ec;
  fs::create_directories(parts_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(parts_dir, ": cannot create: ", ec.message()));
  const auto parts = optim.moment_parts();
  model::NamedTensors tensors;
  for (const auto& p : parts) {
    if (p.len == 0) continue;
    tensors.emplace_back(p.name + ".exp_avg", p.exp_avg.detach().reshape({-1}).cpu());
    tensors.emplace_back(p.name + ".exp_avg_sq", p.exp_avg_sq.detach().reshape({-1}).cpu());
  }
  const std::string bytes = model::encode_safetensors(tensors);
  const uint32_t crc = lm::crc32(bytes.data(), bytes.size());
  const std::string path = (fs::path(parts_dir) / optimizer_rank_file(rank, world)).string();
  LM_RETURN_IF_ERROR(write_file_atomic(path, bytes));
  // The record last: rank 0 adopts a file only through its record.
  return write_json_file((fs::path(parts_dir) / record_name(rank, world)).string(),
                         shard_record(rank, world, parts, bytes.size(), crc));
}

absl::Status adopt_optimizer_shards(const std::string& parts_dir, int world, const Json& steps, const std::string& dir,
                                    std::map<std::string, FileChecksum>* sums) {
  std::vector<Json> records;
  Json files = Json::array();
  for (int r = 0; r < world; ++r) {
    LM_ASSIGN_OR_RETURN(Json rec, read_record(parts_dir, r, world));
    const std::string name = optimizer_rank_file(r, world);
    (*sums)[name] = {rec["bytes"].get<uint64_t>(), rec["crc32"].get<uint32_t>()};
    files.push_back({{"rank", r}, {"file", name}, {"bytes", rec["bytes"]}});
    records.push_back(std::move(rec));
  }
  LM_ASSIGN_OR_RETURN(Json params, index_params(records));
  const Json index = {{"format", kIndexFormat}, {"world_size", world}, {"steps", steps}, {"files", files},
                      {"params", params}};
  LM_RETURN_IF_ERROR(write_json_file((fs::path(dir) / kOptimizerIndex).string(), index));
  for (int r = 0; r < world; ++r) {  // the same file system: a rename, no bytes copied
    const fs::path from = fs::path(parts_dir) / optimizer_rank_file(r, world);
    std::error_code ec;
    fs::rename(from, fs::path(dir) / from.filename(), ec);
    if (ec) return absl::InternalError(absl::StrCat("rename ", from.string(), " into ", dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

bool has_optimizer_index(const std::string& ckpt_dir) { return fs::exists(fs::path(ckpt_dir) / kOptimizerIndex); }

absl::StatusOr<std::vector<std::string>> optimizer_files(const std::string& ckpt_dir) {
  if (!has_optimizer_index(ckpt_dir)) return std::vector<std::string>{"optimizer.safetensors"};
  const std::string path = (fs::path(ckpt_dir) / kOptimizerIndex).string();
  LM_ASSIGN_OR_RETURN(Json index, read_json_file(path));
  std::vector<std::string> out{kOptimizerIndex};
  if (!index["files"].is_array()) return absl::DataLossError(path + ": no \"files\" list (damaged)");
  for (const auto& f : index["files"]) {
    if (!f.is_object() || !f["file"].is_string()) return absl::DataLossError(path + ": a \"files\" entry without \"file\"");
    out.push_back(f["file"].get<std::string>());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ShardedOptimizerReader>> ShardedOptimizerReader::open(const std::string& ckpt_dir) {
  std::unique_ptr<ShardedOptimizerReader> r(new ShardedOptimizerReader());
  r->dir_ = ckpt_dir;
  r->index_path_ = (fs::path(ckpt_dir) / kOptimizerIndex).string();
  LM_ASSIGN_OR_RETURN(Json index, read_json_file(r->index_path_));
  LM_RETURN_IF_ERROR(r->parse(index));
  return r;
}

absl::Status ShardedOptimizerReader::parse(const Json& index) {
  const auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(index_path_, ": ", what, " (not an lmforge optimizer index, or damaged)"));
  };
  if (!index.is_object() || index.value("format", "") != kIndexFormat) return bad("no \"format\": \"" + std::string(kIndexFormat) + "\"");
  world_ = index.value("world_size", 0);
  if (world_ < 1 || !index["steps"].is_object() || !index["params"].is_array()) return bad("world_size, steps or params missing");
  for (auto it = index["steps"].begin(); it != index["steps"].end(); ++it) steps_[it.key()] = it.value().get<int64_t>();
  files_.resize(world_);
  for (const auto& p : index["params"]) {
    Param param{p.value("name", ""), p.value("shape", std::vector<int64_t>{}), {}};
    int64_t numel = 1;
    for (int64_t d : param.shape) numel *= d;
    for (const auto& q : p["parts"]) {
      Part part{q.value("rank", -1), q.value("begin", int64_t{-1}), q.value("len", int64_t{-1})};
      if (part.rank < 0 || part.rank >= world_ || part.begin < 0 || part.len < 1 || part.begin + part.len > numel)
        return bad(absl::StrCat(param.name, ": part ", q.dump(), " outside its ", numel, " elements or ranks"));
      param.parts.push_back(part);
    }
    std::sort(param.parts.begin(), param.parts.end(), [](const Part& a, const Part& b) { return a.begin < b.begin; });
    by_name_[param.name] = params_.size();
    params_.push_back(std::move(param));
  }
  return absl::OkStatus();
}

absl::StatusOr<const model::MappedSafetensors*> ShardedOptimizerReader::file(int rank) {
  if (!files_[rank]) {
    LM_ASSIGN_OR_RETURN(auto f, model::MappedSafetensors::open((fs::path(dir_) / optimizer_rank_file(rank, world_)).string()));
    files_[rank] = std::make_unique<model::MappedSafetensors>(std::move(f));
  }
  return files_[rank].get();
}

absl::Status ShardedOptimizerReader::read(const std::string& key, at::IntArrayRef shape, int64_t begin,
                                          torch::Tensor out) {
  const size_t dot = key.rfind('.');
  auto it = dot == std::string::npos ? by_name_.end() : by_name_.find(key.substr(0, dot));
  if (it == by_name_.end()) return absl::DataLossError(absl::StrCat(index_path_, ": missing ", key));
  const Param& p = params_[it->second];
  if (p.shape != shape.vec())
    return absl::FailedPreconditionError(absl::StrCat(index_path_, ": ", key, " has another shape (other preset?)"));
  const int64_t end = begin + out.numel();
  int64_t covered = 0;
  for (const Part& part : p.parts) {  // every old part that overlaps [begin, end): straddles are cut
    const int64_t lo = std::max(begin, part.begin), hi = std::min(end, part.begin + part.len);
    if (hi <= lo) continue;
    LM_ASSIGN_OR_RETURN(const model::MappedSafetensors* f, file(part.rank));
    const model::SafetensorsEntry* e = f->find(key);
    if (e == nullptr || e->shape != std::vector<int64_t>{part.len})
      return absl::DataLossError(absl::StrCat(f->path(), ": no ", key, " of ", part.len, " elements (as ", index_path_,
                                              " says)"));
    out.narrow(0, lo - begin, hi - lo).copy_(f->view(*e).narrow(0, lo - part.begin, hi - lo));
    covered += hi - lo;
  }
  if (covered != end - begin)
    return absl::DataLossError(absl::StrCat(index_path_, ": the parts of ", key, " cover ", covered, " of elements [",
                                            begin, ", ", end, ") (damaged index)"));
  return absl::OkStatus();
}

absl::StatusOr<model::NamedTensors> ShardedOptimizerReader::whole() {
  model::NamedTensors out;
  for (const auto& [name, t] : steps_) out.emplace_back(name, torch::tensor({t}, torch::kInt64));
  for (const Param& p : params_) {
    for (const char* m : kMoments) {
      auto t = torch::empty(p.shape, torch::kFloat32);
      LM_RETURN_IF_ERROR(read(p.name + "." + m, p.shape, 0, t.view({-1})));
      out.emplace_back(p.name + "." + m, t);
    }
  }
  return out;
}

absl::Status load_sharded_optimizer(const std::string& ckpt_dir, AdamW& optim) {
  LM_ASSIGN_OR_RETURN(auto reader, ShardedOptimizerReader::open(ckpt_dir));
  auto read = [&](const std::string& key, at::IntArrayRef shape, int64_t begin, torch::Tensor out) {
    return reader->read(key, shape, begin, std::move(out));
  };
  return optim.load_state(read, reader->steps(), (fs::path(ckpt_dir) / kOptimizerIndex).string());
}

absl::StatusOr<model::NamedTensors> read_optimizer_state(const std::string& ckpt_dir) {
  if (!has_optimizer_index(ckpt_dir)) {
    LM_ASSIGN_OR_RETURN(auto f, model::load_safetensors((fs::path(ckpt_dir) / "optimizer.safetensors").string()));
    return std::move(f.tensors);
  }
  LM_ASSIGN_OR_RETURN(auto reader, ShardedOptimizerReader::open(ckpt_dir));
  return reader->whole();
}

void remove_parts_leftovers(const std::string& run_dir) {
  std::error_code ec;
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(RunFolder(run_dir).checkpoints(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 6 && n.compare(n.size() - 6, 6, ".parts") == 0) old.push_back(e.path());
  }
  for (const auto& p : old) (void)remove_tree(p.string());  // retried at the next start
}

}  // namespace lm::train
