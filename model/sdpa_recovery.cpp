// What verify_fast_paths does when a fast path fails for a reason other than wrong numbers (issue 38
// item 3): SDPA's other backends, each verified again, before the reference attention (which at a
// large micro-batch does not fit: about 6 GB more per layer at 16 x 2048); a CUDA context lost to a
// sticky error said plainly, since no catch recovers from it. model/verify.h.
#include <ATen/Context.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/verify.h"

#ifdef LM_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace lm::model {

std::string sdpa_backend_in_use() {
  auto& ctx = at::globalContext();
  const bool flash = ctx.userEnabledFlashSDP(), cudnn = ctx.userEnabledCuDNNSDP();
  const bool efficient = ctx.userEnabledMemEfficientSDP(), math = ctx.userEnabledMathSDP();
  if (flash && cudnn && efficient && math) return "auto";
  return flash ? "flash" : cudnn ? "cudnn" : efficient ? "efficient" : "math";
}

FastPathCheck retry_sdpa_backends(const FastPathCheck& failed, torch::Device device,
                                  const std::function<FastPathCheck()>& check, FastPathReport* r) {
  const std::string first = sdpa_backend_in_use();
  std::vector<std::string> tried = {first + ": " + failed.what};
  // The math backend is the reference's own matmul-softmax-matmul inside SDPA: no way out of its memory.
  for (const std::string b : {"flash", "efficient", "cudnn"}) {
    if (b == first) continue;
    set_sdpa_backend(b);
    FastPathCheck c = check();
    if (c.ok()) {
      r->sdpa_backend = b;
      r->notes.push_back(absl::StrFormat(
          "attention.sdpa: backend %s failed here (%s); %s passed the same checks and is used instead "
          "(train.hardware.sdpa_backend=%s says so up front)",
          first, failed.what, b, b));
      return c;
    }
    tried.push_back(b + ": " + c.what);
    if (!device_usable(device, "attention.sdpa (backend " + b + ")", r)) return c;
  }
  set_sdpa_backend(first);
  r->notes.push_back("attention.sdpa: no SDPA backend passed here: " + absl::StrJoin(tried, "; "));
  return failed;
}

bool device_usable(torch::Device device, const std::string& path, FastPathReport* r) {
  if (!device.is_cuda()) return true;
  try {
    torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
    (void)torch::ones({1}, torch::TensorOptions().device(device)).sum().item<float>();
    return true;
  } catch (const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    std::string msg = c10 != nullptr ? c10->what_without_backtrace() : e.what();
    r->error = absl::StrFormat(
        "the CUDA device no longer runs work after %s's check failed (%s): a sticky error such as a kernel's "
        "memory fault, which nothing in this process recovers from. Start again with that path off: "
        "train.hardware.fast_paths_off=%s, or for attention another train.hardware.sdpa_backend (flash, "
        "efficient, cudnn)",
        path, msg.substr(0, msg.find('\n')), path.substr(0, path.find(' ')));
    return false;
  }
}

std::string reference_attention_misfit(const ModelConfig& cfg, torch::ScalarType dtype, torch::Device device,
                                       const RunShape& run) {
  int64_t memory = run.memory_bytes;
#ifdef LM_HAVE_CUDA
  if (memory == 0 && device.is_cuda())
    memory = static_cast<int64_t>(at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->totalGlobalMem);
#endif
  if (memory <= 0) return "";  // a CPU: no limit known here
  // Kept for the backward per layer: the fp32 softmax output and its cast to the compute dtype,
  // [B, H, T, T] each (reference_attention).
  const double elt = dtype == torch::kFloat32 ? 4 : 2;
  const double t = static_cast<double>(std::min(run.seq, cfg.max_seq_len));
  const double need = static_cast<double>(cfg.n_layers) * run.batch * cfg.n_heads * t * t * (4 + elt);
  if (need <= 0.8 * memory) return "";
  return absl::StrFormat(
      "attention: no SDPA backend passed its checks on this device, and the reference attention would keep "
      "%.1f GB of [T, T] scores for the backward (micro-batch %d x %d, %d layers), more than the device's "
      "%.1f GB allow. Name a backend this GPU has (train.hardware.sdpa_backend: flash, efficient, cudnn), or "
      "lower train.batch.micro_batch (raising grad_accum keeps the batch)",
      need / 1e9, run.batch, run.seq, cfg.n_layers, memory / 1e9);
}

}  // namespace lm::model
