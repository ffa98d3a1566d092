// lmtrain check: the verification core on a preset, or --dry-run for sizes and FLOPs; --hf DIR
// imports a Hugging Face checkpoint folder (model/hf_import.h) and checks it.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "app/commands.h"
#include "core/config.h"
#include "core/log.h"
#include "runtime/runtime.h"
#include "model/config.h"
#include "model/hf_import.h"
#include "model/verify.h"

namespace lm::app {
namespace {

struct CheckOptions {
  std::string preset = "tiny";
  std::string model_config;
  std::string hf;  // a Hugging Face checkpoint folder instead of a preset
  std::string device = "auto";  // as fit and lmeval: cuda when a CUDA device is visible, else cpu
  int64_t vocab_size = 0;
  int64_t seq = 0;
  bool dry_run = false;
  bool cuda_kernels = false;
};

void print_sizes(const model::ModelConfig& c, int64_t seq) {
  const int64_t n = model::param_count(c);
  std::printf("preset %-6s  vocab %6ld  d_model %5ld  layers %3ld  heads %3ld/%-3ld  d_ff %5ld  %s\n",
              c.preset.c_str(), c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff,
              c.tie_embeddings ? "tied" : "untied");
  std::printf("  parameters        %14ld  (%s)\n", n, format_count(static_cast<double>(n)).c_str());
  std::printf("  matmul parameters %14ld  (N in 6N)\n", model::matmul_param_count(c));
  std::printf("  train FLOPs/token %14.4g  at seq %ld (6N + 12*L*T*d)\n",
              model::train_flops_per_token(c, seq), seq);
  std::printf("  weights + AdamW   %11.2f GiB  (fp32 weights, grads, 2 moments: 16 bytes/param)\n",
              16.0 * n / (1024.0 * 1024 * 1024));
}

double peak_rss_gib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0);  // Linux: KiB
}

void print_hf_summary(const std::string& dir, const model::HfCheckpointInfo& info) {
  const model::ModelConfig& c = info.config;
  std::printf("checkpoint %s: %s, %zu weight file(s), %.3f GiB stored as %s, %ld tensors\n", dir.c_str(),
              info.architecture.c_str(), info.weight_files.size(), info.file_bytes / (1024.0 * 1024 * 1024),
              info.stored_dtypes.c_str(), info.tensors);
  std::printf("  head_dim %ld, rope theta %g%s, q/k/v bias %s, context %ld\n", c.head_dim(), c.rope_theta,
              c.rope_scaling.type == "llama3"
                  ? absl::StrFormat(" llama3 (factor %g, low %g, high %g, original context %d)", c.rope_scaling.factor,
                                    c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor,
                                    c.rope_scaling.original_max_position_embeddings).c_str()
                  : "",
              c.attention_bias ? "yes" : "no", c.max_seq_len);
}

// --hf: the checkpoint's summary, its weights loaded (time, peak memory), a forward, the fast paths.
absl::Status check_hf(const CheckOptions& o) {
  LM_ASSIGN_OR_RETURN(model::HfCheckpointInfo info, model::inspect_hf_checkpoint(o.hf));
  print_hf_summary(o.hf, info);
  const int64_t seq = o.seq > 0 ? o.seq : std::min<int64_t>(info.config.max_seq_len, 64);
  print_sizes(info.config, seq);
  if (o.dry_run) return absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  LM_ASSIGN_OR_RETURN(model::Transformer m, model::import_hf(o.hf));
  std::printf("  weights loaded     %.2f s, peak RSS %.2f GiB (fp32 model %.2f GiB, files %.2f GiB)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), peak_rss_gib(),
              4.0 * model::param_count(info.config) / (1024.0 * 1024 * 1024), info.file_bytes / (1024.0 * 1024 * 1024));
  torch::NoGradGuard ng;
  m->eval();
  auto logits = m->forward(torch::arange(seq, torch::kInt64).remainder(info.config.vocab_size).unsqueeze(0));
  const bool finite = torch::isfinite(logits).all().item<bool>();
  std::printf("%s forward of %ld tokens: logits %s\n", finite ? "[ok]  " : "[FAIL]", seq, finite ? "finite" : "NOT finite");
  if (!finite) return absl::InternalError(o.hf + ": the imported model's logits are not finite");
  return absl::OkStatus();
}

absl::Status run_check(const CheckOptions& o) {
  if (!o.hf.empty()) return check_hf(o);
  LM_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::preset(o.preset));
  if (!o.model_config.empty()) LM_RETURN_IF_ERROR(load_config_file(o.model_config, cfg));
  if (o.vocab_size > 0) cfg.vocab_size = o.vocab_size;
  LM_RETURN_IF_ERROR(model::validate(cfg));
  const int64_t seq = o.seq > 0 ? o.seq : std::min<int64_t>(cfg.max_seq_len, 64);
  print_sizes(cfg, o.seq > 0 ? o.seq : cfg.max_seq_len);
  if (o.dry_run) return absl::OkStatus();

  torch::Device device(torch::kCPU);
  const bool cuda = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  if (cuda) {
    if (!torch::cuda::is_available())
      return absl::FailedPreconditionError("--device cuda: no CUDA device visible (this build or machine has none)");
    device = torch::Device(torch::kCUDA);
  } else if (o.device != "cpu" && o.device != "auto") {
    return absl::InvalidArgumentError("--device: expected auto, cpu or cuda, got '" + o.device + "'");
  }
  for (const auto& line : absl::StrSplit(version_report("lmtrain check"), '\n')) log_info("%s", std::string(line));
  model::Transformer m(cfg);
  m->to(device);
  if (o.cuda_kernels) {
    if (!m->set_cuda_kernels(true))
      return absl::FailedPreconditionError("--cuda-kernels: this build has no CUDA kernels (LibTorch without CUDA, or no nvcc when it was built)");
    if (!device.is_cuda()) log_warn("--cuda-kernels: they act on CUDA tensors only; on the CPU the checks below use the reference paths");
  }
  bool ok = true;
  auto say = [&](bool pass, const std::string& line) {
    ok = ok && pass;
    std::printf("%s %s\n", pass ? "[ok]  " : "[FAIL]", line.c_str());
  };
  auto grad = model::check_gradient_flow(m, 2, seq, 1);
  say(grad.ok(), grad.summary());
  auto causal = model::check_causality(m, seq, 2);
  say(causal.ok(), causal.summary());
  auto init = model::check_init_loss(m, 4, seq, 3);
  say(init.ok(), init.summary());
  std::vector<torch::ScalarType> dtypes = {torch::kFloat32};
  if (device.is_cuda()) dtypes.push_back(torch::kBFloat16);
  for (auto dt : dtypes) {  // the registry of model/verify.h: what `fit` checks at start-up
    auto fp = model::verify_fast_paths(m, device, dt, 4);
    for (const auto& c : fp.checks) say(c.ok(), std::string(c10::toString(dt)) + " " + c.summary());
  }
  if (!ok) return absl::InternalError("verification failed (see [FAIL] lines above)");
  std::printf("all checks passed\n");
  return absl::OkStatus();
}

}  // namespace

void add_check(CLI::App& app, Registry& reg) {
  static CheckOptions o;
  auto* sub = app.add_subcommand("check", "verify a model preset: gradient flow, causality, init loss, every fast path against its reference");
  sub->add_option("--preset", o.preset, "model preset: tiny, small, 124m, 400m, 1b")->capture_default_str();
  sub->add_option("--model-config", o.model_config, "JSON file overriding preset fields");
  sub->add_option("--hf", o.hf, "a Hugging Face checkpoint folder (Llama 2/3/3.1/3.2, Qwen2): import it and print its "
                                "summary, load time and peak memory (--dry-run: the summary only)");
  sub->add_option("--vocab-size", o.vocab_size, "override the preset's vocabulary size");
  sub->add_option("--seq-len,--seq", o.seq, "sequence length for the checks (default: min(max_seq_len, 64))");
  sub->add_option("--device", o.device, "auto (cuda when a CUDA device is visible, else cpu, as fit), cpu or cuda")
      ->capture_default_str();
  sub->add_flag("--dry-run", o.dry_run, "print parameter counts and FLOPs only");
  sub->add_flag("--cuda-kernels", o.cuda_kernels,
                "also check lmforge's own SwiGLU, rotary and residual add + RMSNorm CUDA kernels (what fit's train.hardware.cuda_kernels turns on)");
  sub->footer(
      "Examples:\n"
      "  lmtrain check --preset tiny\n"
      "  lmtrain check --preset 400m --dry-run\n"
      "  lmtrain check --preset small --device cuda\n"
      "  lmtrain check --preset 400m --device cuda --cuda-kernels   # before fit --set hardware.cuda_kernels=true\n"
      "  lmtrain check --hf hf/Llama-3.2-1B                          # before fit --init-from hf/Llama-3.2-1B");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_check(o); }});
}

}  // namespace lm::app
