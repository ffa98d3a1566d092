#include "train/distributed.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <c10/core/impl/DeviceGuardImplInterface.h>
// LM_HAVE_NCCL comes from train/CMakeLists.txt when LibTorch has CUDA (its torch_cuda target
// exports USE_C10D_NCCL) and nccl.h is found; a CPU-only LibTorch builds the Gloo path only.
#if defined(LM_HAVE_NCCL)
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/log.h"
#include "core/signals.h"

namespace lm::train {

namespace {
absl::StatusOr<int> env_int(const char* name, int fallback, bool* found) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != 0 || x < 0) return absl::InvalidArgumentError(absl::StrFormat("environment %s=%s: expected a non-negative integer", name, v));
  *found = true;
  return static_cast<int>(x);
}
}  // namespace

absl::StatusOr<DistEnv> dist_env_from_environment() {
  DistEnv e;
  bool found = false, slurm = false;
  LM_ASSIGN_OR_RETURN(e.world, env_int("WORLD_SIZE", 1, &found));
  LM_ASSIGN_OR_RETURN(e.rank, env_int("RANK", 0, &found));
  LM_ASSIGN_OR_RETURN(e.local_rank, env_int("LOCAL_RANK", e.rank, &found));
  if (!found) {  // Slurm srun without torchrun
    LM_ASSIGN_OR_RETURN(e.world, env_int("SLURM_NTASKS", 1, &slurm));
    LM_ASSIGN_OR_RETURN(e.rank, env_int("SLURM_PROCID", 0, &slurm));
    LM_ASSIGN_OR_RETURN(e.local_rank, env_int("SLURM_LOCALID", 0, &slurm));
  }
  bool dummy = false;
  LM_ASSIGN_OR_RETURN(e.master_port, env_int("MASTER_PORT", 29500, &dummy));
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != 0) e.master_addr = a;
  // torchrun (torch.distributed.run) sets "True" (Python's str(True)) when its agent hosts the store.
  if (const char* a = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); a != nullptr) e.agent_store = std::string(a) == "True";
  if (e.world < 1) return absl::InvalidArgumentError("WORLD_SIZE must be >= 1");
  if (e.rank >= e.world)
    return absl::InvalidArgumentError(absl::StrFormat("RANK=%d is not below WORLD_SIZE=%d", e.rank, e.world));
  return e;
}

absl::StatusOr<torch::Device> rank_device(const DistEnv& env, torch::DeviceType type) {
  if (type != torch::kCUDA) return torch::Device(type);
  if (!torch::cuda::is_available())
    return absl::FailedPreconditionError("device cuda: no CUDA device is visible (nvidia-smi; in Docker: --gpus all)");
  const int n = static_cast<int>(torch::cuda::device_count());
  if (env.local_rank >= n) {
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d: LOCAL_RANK=%d but only %d CUDA device(s) are visible (CUDA_VISIBLE_DEVICES=%s); start at most "
        "%d processes per node (torchrun --nproc-per-node %d)",
        env.rank, env.local_rank, n, vis != nullptr ? vis : "(unset)", n, n));
  }
  const torch::Device dev(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  // The persistent form of torch.cuda.set_device (a DeviceGuard would restore on scope exit).
  c10::impl::getDeviceGuardImpl(torch::kCUDA)->setDevice(dev);
  return dev;
}

// ProcessGroupGloo/NCCL are c10d::Backend subclasses; we drive one backend directly.
using PgBase = c10d::Backend;

bool nccl_available() {
#if defined(LM_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#if defined(LM_HAVE_NCCL)
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

// A Gloo group on `store` (loopback when the master is local).
c10::intrusive_ptr<PgBase> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                      std::chrono::seconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  const bool loopback = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
  opts->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                   : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world, opts);
}

struct Comm::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<PgBase> pg;
  c10::intrusive_ptr<PgBase> control;  // CPU (Gloo): pg itself on CPU, its own group beside NCCL
  int rank = 0, world = 1;
  torch::Device device{torch::kCPU};
  const char* backend = "gloo";
};

Comm::Comm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Comm::~Comm() = default;
int Comm::rank() const { return impl_->rank; }
int Comm::world() const { return impl_->world; }

absl::StatusOr<std::unique_ptr<Comm>> Comm::connect(const DistEnv& env, const torch::Device& device,
                                                    std::chrono::seconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->world = env.world;
  impl->device = device;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    // Under torchrun the agent's store already listens on MASTER_PORT: a second server there would
    // fail to bind, so every rank is a client (what torch.distributed's _create_c10d_store does).
    so.isServer = env.rank == 0 && !env.agent_store;
    so.numWorkers = env.world;
    so.waitWorkers = true;
    so.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    so.useLibUV = kStoreUsesLibUV;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    // Our keys apart from the agent's own in a shared store.
    impl->store = c10::make_intrusive<c10d::PrefixStore>("lmforge/", tcp);
    if (device.is_cuda()) {
#if defined(LM_HAVE_NCCL)
      // Unrun in this project so far (no multi-GPU machine); see docs/distributed.md.
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
      impl->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl->store, env.rank, env.world, opts);
      impl->backend = "nccl";
      impl->control = gloo_group(c10::make_intrusive<c10d::PrefixStore>("control/", impl->store), env, timeout);
#else
      return absl::UnimplementedError(
          "data parallel on CUDA needs a LibTorch built with NCCL and nccl.h at build time (LibTorch 2.x "
          "CUDA image, see docs/distributed.md); this build has Gloo only");
#endif
    } else {
      impl->pg = impl->control = gloo_group(impl->store, env, timeout);
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d: cannot join the process group at %s:%d within %ds: %s (are all %d ranks started? is the port free?)",
        env.rank, env.master_addr, env.master_port, static_cast<int>(timeout.count()), e.what(), env.world));
  }
  return std::unique_ptr<Comm>(new Comm(std::move(impl)));
}

void Comm::broadcast(std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard g;
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t.data()};
    impl_->pg->broadcast(one)->wait();
  }
}

std::function<void()> Comm::start_sum(torch::Tensor flat) {
  std::vector<at::Tensor> one{flat};
  c10::intrusive_ptr<c10d::Work> work = impl_->pg->allreduce(one);
  return [work] { work->wait(); };
}

std::function<void()> Comm::start_reduce_scatter(torch::Tensor out, torch::Tensor in) {
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  c10::intrusive_ptr<c10d::Work> work = impl_->pg->_reduce_scatter_base(out, in, o);
  return [work] { work->wait(); };
}

std::function<void()> Comm::start_all_gather(torch::Tensor out, torch::Tensor in) {
  c10::intrusive_ptr<c10d::Work> work = impl_->pg->_allgather_base(out, in);
  return [work] { work->wait(); };
}

const char* Comm::backend() const { return impl_->backend; }

double Comm::sum(double value) {
  std::vector<at::Tensor> t{torch::tensor({value}, torch::kFloat64).to(impl_->device)};
  impl_->pg->allreduce(t)->wait();
  return t[0].item<double>();
}

int64_t Comm::host_max(int64_t value) {
  std::vector<at::Tensor> t{torch::tensor({value}, torch::kInt64)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->control->allreduce(t, o)->wait();
  return t[0].item<int64_t>();
}

double Comm::max(double value) {
  std::vector<at::Tensor> t{torch::tensor({value}, torch::kFloat64).to(impl_->device)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->pg->allreduce(t, o)->wait();
  return t[0].item<double>();
}

absl::Status Comm::check_same(const std::string& what, const std::string& value, const std::string& hint) {
  const uint64_t h = fnv1a64(value.data(), value.size());
  // Two halves as doubles keep the comparison exact (each < 2^32).
  const double lo = static_cast<double>(h & 0xffffffffULL), hi = static_cast<double>(h >> 32);
  const bool same = max(lo) == -max(-lo) && max(hi) == -max(-hi);
  if (!same) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d: ranks disagree on the %s (this rank has %s); %s", impl_->rank, what, hex64(h), hint));
  }
  return absl::OkStatus();
}

void Comm::barrier() { impl_->pg->barrier()->wait(); }

int launch_local_ranks(int nproc, int argc, char** argv, int master_port) {
  std::vector<pid_t> pids;
  // Children drop --nproc from their command line; the launcher variables tell them their rank.
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--nproc") { ++i; continue; }
    if (a.rfind("--nproc=", 0) == 0) continue;
    args.push_back(a);
  }
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  // Forward stop signals to every rank; they finish the step and checkpoint together.
  static std::vector<pid_t>* children = &pids;
  on_stop_signals([](int sig) { for (pid_t p : *children) kill(p, sig); });
  int rc = 0;
  size_t alive = pids.size();
  while (alive > 0) {
    int status = 0;
    pid_t done = wait(&status);
    if (done < 0) { if (errno == EINTR) continue; break; }
    --alive;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && rc == 0) {
      rc = code;
      log_warn("a rank exited with %d: stopping the others", code);
      for (pid_t p : pids) if (p != done) kill(p, SIGTERM);
    }
  }
  return rc;
}

}  // namespace lm::train
