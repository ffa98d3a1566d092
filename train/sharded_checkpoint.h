// Per-rank optimizer files (issue 39 item 3): under ZeRO-1 every rank writes its own part of
// AdamW's moments, and a resume at any world size reads exactly the elements it needs.
//
//   checkpoints/step-N/optimizer.rank-00001-of-00004.safetensors  rank 1's moments: for every
//       parameter with elements on rank 1, "<name>.exp_avg" and "<name>.exp_avg_sq", [len] each
//   checkpoints/step-N/optimizer.index.json  {"format": "lmforge-optimizer-index/1", "world_size": 4,
//       "steps": {"__step__": 100, "__step__.blocks": 100, ...}, "files": [{"rank", "file", "bytes"}],
//       "params": [{"name", "shape", "parts": [{"rank", "begin", "len", "file", "tensors"}]}]}
//       where part [begin, begin + len) is of the flattened parameter, as AdamW's ParamPart.
//
// The commit: each rank writes its file and a record of it (its parts, its bytes and CRC-32) into
// checkpoints/step-N.parts/ (atomic writes); the ranks agree every write succeeded; rank 0's writer
// then builds the index from the records in its step-N.tmp folder, moves the rank files in (a
// rename), writes the manifest (the ranks' CRCs: rank 0 reads no other rank's bytes) and renames
// the folder to step-N before `latest` moves. A kill anywhere leaves step-N.parts or step-N.tmp,
// which no resume reads and the next write or resume removes.
//
// model.safetensors stays whole (rank 0; the distributed optimizer's fp32 masters gathered into it:
// exact, so the masters are not written twice).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint_manifest.h"
#include "core/config.h"
#include "model/safetensors.h"
#include "train/optim.h"

namespace lm::train {

inline constexpr const char* kOptimizerIndex = "optimizer.index.json";

// "optimizer.rank-00001-of-00004.safetensors".
std::string optimizer_rank_file(int rank, int world);
// checkpoints/step-N.parts: where the ranks write their files before rank 0 commits the step.
std::string checkpoint_parts_dir(const std::string& run_dir, int64_t step);

// One rank: its moments' parts into `parts_dir`/optimizer_rank_file(rank, world) and a record of
// them beside it (.json), each written atomically. Errors name the file.
absl::Status write_optimizer_shard(const std::string& parts_dir, int rank, int world, const AdamW& optim);

// Rank 0's writer, inside the checkpoint's temp folder `dir`: the index from the `world` records
// in `parts_dir` (with `steps`, AdamW's "__step__..." counts) and every rank file moved into
// `dir`; `sums` gets their sizes and CRCs as the ranks wrote them (for the manifest).
absl::Status adopt_optimizer_shards(const std::string& parts_dir, int world, const Json& steps, const std::string& dir,
                                    std::map<std::string, FileChecksum>* sums);

// Whether checkpoint `dir` holds per-rank optimizer files (an index) instead of optimizer.safetensors.
bool has_optimizer_index(const std::string& ckpt_dir);
// The optimizer's files of a checkpoint: optimizer.safetensors, or the index and every file it names.
absl::StatusOr<std::vector<std::string>> optimizer_files(const std::string& ckpt_dir);

// The index of a checkpoint, opened: reads any range of any moment from the rank files that hold it.
class ShardedOptimizerReader {
 public:
  static absl::StatusOr<std::unique_ptr<ShardedOptimizerReader>> open(const std::string& ckpt_dir);
  // AdamW::MomentReader: elements [begin, begin + out.numel()) of moment `key` ("<name>.exp_avg").
  absl::Status read(const std::string& key, at::IntArrayRef shape, int64_t begin, torch::Tensor out);
  const std::map<std::string, int64_t>& steps() const { return steps_; }
  // Every moment whole, in the order of AdamW::state() (step counts first): tests and tools.
  absl::StatusOr<model::NamedTensors> whole();

 private:
  struct Part {
    int rank = 0;
    int64_t begin = 0, len = 0;
  };
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<Part> parts;  // by begin
  };
  absl::Status parse(const Json& index);
  absl::StatusOr<const model::MappedSafetensors*> file(int rank);

  std::string dir_, index_path_;
  int world_ = 0;
  std::map<std::string, int64_t> steps_;
  std::vector<Param> params_;
  std::map<std::string, size_t> by_name_;
  std::vector<std::unique_ptr<model::MappedSafetensors>> files_;  // opened when first read
};

// load_optimizer for a checkpoint with an index: this rank's elements only.
absl::Status load_sharded_optimizer(const std::string& ckpt_dir, AdamW& optim);
// The whole optimizer state of any checkpoint (optimizer.safetensors, or the rank files assembled).
absl::StatusOr<model::NamedTensors> read_optimizer_state(const std::string& ckpt_dir);

// checkpoints/step-N.parts folders a killed run left (rank 0 at the start, before any rank writes).
void remove_parts_leftovers(const std::string& run_dir);

}  // namespace lm::train
