#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "core/checkpoint_manifest.h"
#include "core/file.h"
#include "core/run_folder.h"
#include "model/safetensors.h"
#include "train/sharded_checkpoint.h"

namespace lm::train {
namespace fs = std::filesystem;

namespace {

// Writes the three files into `tmp` and renames it to `final_dir`; no cleanup on error.
absl::Status write_checkpoint_folder(const fs::path& tmp, const fs::path& final_dir, const CheckpointSnapshot& snap) {
  std::error_code ec;
  if (!fs::create_directory(tmp, ec))
    return absl::InternalError(absl::StrCat(tmp.string(), ": cannot create: ", ec.message()));
  // write_file_atomic fsyncs each file; fsync_tree below makes the folder entries durable.
  LM_RETURN_IF_ERROR(model::save_safetensors((tmp / "model.safetensors").string(), snap.model, {{"format", "pt"}}));
  std::map<std::string, FileChecksum> sums;  // the ranks' files: summed by the rank that wrote each
  if (snap.optimizer_parts.empty()) {
    LM_RETURN_IF_ERROR(model::save_safetensors((tmp / "optimizer.safetensors").string(), snap.optimizer));
  } else {
    LM_RETURN_IF_ERROR(adopt_optimizer_shards(snap.optimizer_parts, snap.world, snap.optimizer_steps, tmp.string(), &sums));
  }
  LM_RETURN_IF_ERROR(write_json_file((tmp / "trainer.json").string(), snap.trainer_state));
  // Last: each file's size and CRC-32 as written (core/checkpoint_manifest.h).
  LM_RETURN_IF_ERROR(write_checkpoint_manifest(tmp.string(), sums));
  LM_RETURN_IF_ERROR(fsync_tree(tmp.string()));
  // A complete copy of this step that `latest` does not name yet.
  LM_RETURN_IF_ERROR(remove_tree(final_dir.string()));
  fs::rename(tmp, final_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", tmp.string(), ": ", ec.message()));
  return fsync_dir(final_dir.parent_path().string());
}

/// keep-last-K: delete the oldest complete checkpoints beyond K (never `keep`, the new one). Only
// `step-N` folders: never a temp folder of a write, nor one a resume set aside as damaged.
void prune_checkpoints(const fs::path& root, const std::string& keep, int64_t keep_last) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && RunFolder::parse_step_name(n).ok()) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 0; i + keep_last < names.size(); ++i) {
    if (names[i] != keep) (void)remove_tree((root / names[i]).string());  // retried at the next prune
  }
}

// Temp folders of this step a killed writer left ("step-N.tmp", "step-N.tmp.<pid>"): they hold
// space. Only under the run lock (core/run_lock.h) is no other writer alive to own one. And the
// ranks' optimizer files of an earlier step that never became a checkpoint ("step-M.parts", M < N:
// the ranks may be writing those of a later step meanwhile).
void remove_leftovers(const fs::path& root, const std::string& name) {
  std::error_code ec;
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    const bool parts = n.size() > 6 && n.compare(n.size() - 6, 6, ".parts") == 0 && n < name;  // step names sort
    if (n.rfind(name + ".tmp", 0) == 0 || parts) old.push_back(e.path());
  }
  for (const auto& p : old) (void)remove_tree(p.string());  // retried at the next write of this step
}

model::NamedTensors to_cpu(model::NamedTensors tensors, bool copy) {
  // A copy (clone on CPU, device-to-host on CUDA) so the step after may update the originals.
  for (auto& [name, t] : tensors) t = copy || !t.device().is_cpu() ? t.detach().to(torch::TensorOptions().device(torch::kCPU), /*non_blocking=*/false, /*copy=*/true) : t.detach();
  return tensors;
}

}  // namespace

CheckpointSnapshot snapshot_checkpoint(int64_t step, model::Transformer& model, const AdamW& optim,
                                       const Json& trainer_state, bool copy) {
  return snapshot_checkpoint(step, model, optim.state(), trainer_state, {}, copy);
}

CheckpointSnapshot snapshot_checkpoint(int64_t step, model::Transformer& model, const model::NamedTensors& optimizer,
                                       const Json& trainer_state, const model::NamedTensors& fp32_weights, bool copy) {
  torch::NoGradGuard no_grad;
  CheckpointSnapshot s;
  s.step = step;
  model::NamedTensors weights = model::module_state(*model);
  for (const auto& [name, t] : fp32_weights) {
    auto it = std::find_if(weights.begin(), weights.end(), [&](const auto& w) { return w.first == name; });
    TORCH_CHECK(it != weights.end(), "snapshot_checkpoint: no parameter ", name, " for its fp32 weights");
    TORCH_CHECK(it->second.sizes() == t.sizes(), "snapshot_checkpoint: ", name, " is ", it->second.sizes(),
                " but its fp32 weights are ", t.sizes());
    it->second = t;
  }
  s.model = to_cpu(weights, copy);
  s.optimizer = to_cpu(optimizer, copy);
  s.trainer_state = trainer_state;
  return s;
}

absl::Status save_checkpoint(const std::string& run_dir, int64_t step, model::Transformer& model,
                             const AdamW& optim, const Json& trainer_state, int64_t keep_last) {
  return write_checkpoint(run_dir, snapshot_checkpoint(step, model, optim, trainer_state, /*copy=*/false), keep_last);
}

absl::Status write_checkpoint(const std::string& run_dir, const CheckpointSnapshot& snap, int64_t keep_last) {
  const RunFolder run(run_dir);
  const fs::path root = run.checkpoints();
  const std::string name = RunFolder::step_name(snap.step);
  // This process's own temp folder (two writers never share one; the run lock keeps it to one).
  const fs::path tmp = root / absl::StrFormat("%s.tmp.%d", name, static_cast<int>(::getpid()));
  const fs::path final_dir = root / name;
  std::error_code ec;
  fs::create_directories(root, ec);
  remove_leftovers(root, name);
  // A step is written once: re-saving the step `latest` names (a signal right after a periodic
  // checkpoint) would delete the only good checkpoint before the rename, and a kill in between
  // would leave `latest` pointing at nothing. The state at one step is the same either way.
  auto current = find_checkpoint(run_dir, -1);
  const bool already = current.ok() && fs::path(*current).filename() == name;
  if (!already) {
    absl::Status st = write_checkpoint_folder(tmp, final_dir, snap);
    if (!st.ok()) {
      // Disk full or a write error: drop the partial folder (it holds space) and say what is left.
      (void)remove_tree(tmp.string());
      if (!snap.optimizer_parts.empty()) (void)remove_tree(snap.optimizer_parts);
      const std::string kept = current.ok() ? *current + " (untouched, resume from it with --resume)"
                                            : std::string("none yet");
      return absl::Status(st.code(), absl::StrCat("checkpoint ", name, " not written: ", st.message(),
                                                  "; last good checkpoint: ", kept));
    }
    LM_RETURN_IF_ERROR(write_file_atomic(run.latest(), name + "\n"));
  }
  if (!snap.optimizer_parts.empty()) (void)remove_tree(snap.optimizer_parts);  // the records (or an unused step's files)
  prune_checkpoints(root, name, keep_last);
  return absl::OkStatus();
}

CheckpointWriter::CheckpointWriter(std::string run_dir, int64_t keep_last)
    : run_dir_(std::move(run_dir)), keep_last_(keep_last) {}

CheckpointWriter::~CheckpointWriter() { (void)wait(); }

absl::Status CheckpointWriter::start(CheckpointSnapshot snap) {
  LM_RETURN_IF_ERROR(wait());
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = true;
  }
  thread_ = std::thread([this, snap = std::move(snap)]() {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = write_checkpoint(run_dir_, snap, keep_last_);
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(st);
    last_write_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    busy_ = false;
  });
  return absl::OkStatus();
}

absl::Status CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status st = status_;
  status_ = absl::OkStatus();  // reported once
  return st;
}

bool CheckpointWriter::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

double CheckpointWriter::last_write_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_write_s_;
}

absl::Status load_optimizer(const std::string& ckpt_dir, AdamW& optim) {
  if (has_optimizer_index(ckpt_dir)) return load_sharded_optimizer(ckpt_dir, optim);
  const std::string path = (fs::path(ckpt_dir) / "optimizer.safetensors").string();
  LM_ASSIGN_OR_RETURN(auto f, model::load_safetensors(path));
  return optim.load_state(f.tensors, path);
}

std::string cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto state = gen.get_state();
  std::string hex;
  const auto* p = state.data_ptr<uint8_t>();
  for (int64_t i = 0; i < state.numel(); ++i) hex += absl::StrFormat("%02x", p[i]);
  return hex;
}

absl::Status set_cpu_rng_state(const std::string& hex) {
  if (hex.size() % 2 != 0) return absl::DataLossError("rng state: odd hex length");
  auto state = torch::empty({static_cast<int64_t>(hex.size() / 2)}, torch::kUInt8);
  auto* p = state.data_ptr<uint8_t>();
  for (size_t i = 0; i < hex.size() / 2; ++i) p[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state);
  } catch (const std::exception& e) {
    return absl::DataLossError(std::string("rng state: ") + e.what());
  }
  return absl::OkStatus();
}

}  // namespace lm::train
