// lmtrain plan: parameters, FLOPs, memory, time and cost of a pretraining run, before renting it.
#include <cstdio>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "app/commands.h"
#include "core/config.h"
#include "model/config.h"
#include "train/plan.h"

namespace lm::app {
namespace {

struct PlanOptions {
  std::string preset = "400m";
  std::string model_config;
  std::optional<double> tokens;  // unset: the preset's budget (2e9 for the CPU presets)
  std::string gpu = "h100";
  int gpus = 1;
  int64_t seq = 0;
  int64_t micro_batch = 0;
  double mfu = 0.4;
  double price = 0;
  double peak_tflops = 0;
  double memory_gb = 0;
  double hours = 0;
};

absl::Status run_plan(const PlanOptions& o) {
  LM_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::preset(o.preset));
  if (!o.model_config.empty()) LM_RETURN_IF_ERROR(load_config_file(o.model_config, cfg));
  train::PlanRequest req;
  req.model = cfg;
  const double preset_tokens = model::preset_training(cfg.preset).tokens;
  req.tokens = o.tokens ? *o.tokens : (preset_tokens > 0 ? preset_tokens : 2e9);
  req.gpu = o.gpu;
  req.n_gpus = o.gpus;
  req.seq_len = o.seq;
  req.micro_batch = o.micro_batch;
  req.mfu = o.mfu;
  req.price_per_hour = o.price;
  req.peak_flops = o.peak_tflops * 1e12;
  req.memory_bytes = o.memory_gb * 1e9;
  LM_ASSIGN_OR_RETURN(train::Plan plan, train::make_plan(req));
  std::printf("%s", train::format_plan(plan, req).c_str());
  if (o.hours > 0) {
    // What a finished run's wall time says about its utilisation.
    const double full = train::implied_mfu(req.tokens, plan.flops_per_token, o.hours, o.gpus, plan.peak_flops);
    const double six_n = train::implied_mfu(req.tokens, 6.0 * static_cast<double>(plan.params), o.hours, o.gpus,
                                            plan.peak_flops);
    std::printf("a run of %.1f h for these tokens implies MFU %.2f%% (6N + 12·L·T·d at T = %ld) or %.2f%% "
                "(6·N·D with N = all %.0fM parameters, as reports usually count)\n",
                o.hours, 100 * full, plan.seq_len, 100 * six_n, plan.params / 1e6);
  }
  return absl::OkStatus();
}

}  // namespace

void add_plan(CLI::App& app, Registry& reg) {
  static PlanOptions o;
  auto* sub = app.add_subcommand("plan", "estimate parameters, FLOPs, memory, time and cost of a pretraining run");
  sub->add_option("--preset", o.preset, "model preset: tiny, small, 124m, 400m, 1b")->capture_default_str();
  sub->add_option("--model-config", o.model_config, "JSON file overriding preset fields");
  sub->add_option("--tokens", o.tokens, "training tokens (default: the preset's budget, docs/gpu.md)");
  sub->add_option("--gpu", o.gpu, "GPU of train/device.cpp's table: " + absl::StrJoin(train::gpu_names(), ", ") +
                                       " (h100 is the SXM module, also h100-sxm)")
      ->capture_default_str();
  sub->add_option("--gpus", o.gpus, "number of GPUs (data parallel)")->capture_default_str();
  sub->add_option("--seq-len,--seq", o.seq, "sequence length (default: the preset's training sequence, docs/gpu.md)");
  sub->add_option("--micro-batch", o.micro_batch,
                  "micro-batch per GPU (default: the preset's when it fits, else the largest that fits)");
  sub->add_option("--mfu", o.mfu, "assumed model FLOPs utilisation, a fraction")->capture_default_str();
  sub->add_option("--price-per-hour,--price", o.price, "dollars per GPU-hour (prints the cost)");
  sub->add_option("--peak-tflops", o.peak_tflops, "override the table's dense bf16 peak (TFLOP/s)");
  sub->add_option("--memory-gb", o.memory_gb, "override the table's memory per GPU (GB)");
  sub->add_option("--hours", o.hours, "wall time of a finished run: prints the MFU it implies");
  sub->footer(
      "Examples:\n"
      "  lmtrain plan --preset 400m --tokens 2e9 --gpu h100 --mfu 0.4 --price-per-hour 3\n"
      "  lmtrain plan --preset 400m --tokens 2e9 --gpu h100 --hours 54.6 --price 3   # the reference report's run\n"
      "  lmtrain plan --preset 1b --tokens 20e9 --gpu h100 --gpus 8\n"
      "  lmtrain plan --preset 400m --gpu h100-pcie --micro-batch 64   # says whether it fits, and what does\n"
      "The last two lines are the 'lmtrain fit' and 'docker run' commands that train what the plan assumes.");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_plan(o); }});
}

}  // namespace lm::app
