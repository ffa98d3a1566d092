// Data parallelism on PyTorch's c10d (Gloo on CPU; NCCL on CUDA builds that have it), started by
// torchrun/Slurm through RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or by --nproc.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::train {

struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent already hosts the store at MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 included, connects as a client.
  bool agent_store = false;
  bool active() const { return world > 1; }
};

// Reads the launcher's variables (torchrun, or Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID);
// errors name the variable.
absl::StatusOr<DistEnv> dist_env_from_environment();

// This rank's device for `type`: the CPU, or CUDA device LOCAL_RANK (torchrun, Slurm, --nproc), made
// the current CUDA device before any other CUDA call so that the NCCL communicator, the caching
// allocator and every kernel of this rank use its own GPU. Errors when LOCAL_RANK is not below the
// number of visible GPUs, naming both and CUDA_VISIBLE_DEVICES.
absl::StatusOr<torch::Device> rank_device(const DistEnv& env, torch::DeviceType type);

// Whether this build has ProcessGroupNCCL compiled in (LibTorch with CUDA, nccl.h found at build time).
bool nccl_available();
// The NCCL version LibTorch loaded ("2.28.9"), or "" without NCCL.
std::string nccl_version();

// The TCPStore backend, chosen explicitly: the classic one. LibTorch >= 2.4 defaults to libuv,
// which builds without libuv (Debian's libtorch-dev) refuse at connect time; the classic store
// serves the rendezvous of a few hundred ranks, which is all lmforge asks of it.
inline constexpr bool kStoreUsesLibUV = false;

// A process group (Gloo on CPU, NCCL for a CUDA device when built with it). All collectives time
// out after `timeout`, so a dead rank makes the others fail loudly instead of hanging.
class Comm {
 public:
  static absl::StatusOr<std::unique_ptr<Comm>> connect(const DistEnv& env, const torch::Device& device,
                                                       std::chrono::seconds timeout);
  ~Comm();
  int rank() const;
  int world() const;

  // rank 0's values into every rank's tensors (identical initialisation).
  void broadcast(std::vector<torch::Tensor>& tensors);
  // Starts an in-place SUM all-reduce of `flat`; the returned function blocks until it is done
  // (on NCCL: until the current stream is ordered after it). Gradient buckets: train/grad_sync.h.
  std::function<void()> start_sum(torch::Tensor flat);
  // ZeRO-1 (train/zero.h): starts a SUM reduce-scatter of `in` ([world·k]) into `out` ([k], this
  // rank's k elements), or an all-gather of every rank's `in` ([k]) into `out` ([world·k], rank r's
  // at r·k). Both contiguous, one dtype; the returned function blocks until it is done.
  std::function<void()> start_reduce_scatter(torch::Tensor out, torch::Tensor in);
  std::function<void()> start_all_gather(torch::Tensor out, torch::Tensor in);
  // "gloo" or "nccl".
  const char* backend() const;
  double sum(double value);
  double max(double value);
  // The max over ranks on a CPU group (Gloo; the main group itself on CPU, a second Gloo group on
  // the same store beside NCCL): the host agrees without waiting for the GPU (the per-micro-batch
  // stop agreement, train/trainer.cpp).
  int64_t host_max(int64_t value);
  // Every rank must pass the same string (config and tokenizer hash); errors name the ranks and end
  // with `hint`.
  absl::Status check_same(const std::string& what, const std::string& value,
                          const std::string& hint = "start every rank with the same config, data and tokenizer");
  void barrier();

  struct Impl;

 private:
  explicit Comm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `lmtrain fit --nproc N` without a launcher: re-executes this program N times with the launcher
// variables set, forwards SIGINT/SIGTERM, and ends every rank when one fails. Returns the exit code.
int launch_local_ranks(int nproc, int argc, char** argv, int master_port);

}  // namespace lm::train
