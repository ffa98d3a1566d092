// lmtrain plan: parameters, FLOPs, memory, time and cost of a pretraining run, before renting it.
#include <cstdio>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "app/commands.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/file.h"
#include "model/config.h"
#include "train/plan.h"

namespace lm::app {
namespace {

struct PlanOptions {
  std::string preset = "400m";
  std::string model_config;
  std::optional<double> tokens;  // unset: the preset's budget (2e9 for the CPU presets)
  std::optional<double> mfu_given;
  std::string gpu = "h100";
  int gpus = 1;
  int gpus_per_node = 8;
  std::string recompute = "auto";
  std::string zero = "auto";
  std::string master_weights = "auto";
  std::string sbatch;
  int64_t seq = 0;
  int64_t micro_batch = 0;
  double price = 0;
  double peak_tflops = 0;
  double memory_gb = 0;
  double hours = 0;
};

// The model of a config file in fit's format ({"model": {...}, "train": {...}}: the same file
// `fit --config` takes) over the preset; bare model fields, plan's format before, still read.
absl::Status apply_model_config(const std::string& path, model::ModelConfig& cfg) {
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  if (!j.is_object()) return absl::InvalidArgumentError(path + ": expected a JSON object {\"model\": {...}}");
  const std::string preset = cfg.preset;
  if (j.contains("model")) {
    LM_RETURN_IF_ERROR(from_json(j["model"], cfg, "model"));
  } else {
    LM_RETURN_IF_ERROR(from_json(j, cfg));
    std::fprintf(stderr, "plan: %s holds bare model fields; fit --config wants them under \"model\": "
                         "{\"model\": {...}} works for both\n", path.c_str());
  }
  cfg.preset = preset;  // the base shape fit starts from (--preset), the file's fields over it
  return absl::OkStatus();
}

absl::Status run_plan(const PlanOptions& o) {
  LM_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::preset(o.preset));
  if (!o.model_config.empty()) {
    auto applied = apply_model_config(o.model_config, cfg);
    if (!applied.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", applied.message()));
  }
  train::PlanRequest req;
  req.model = cfg;
  req.model_source = o.model_config;
  req.gpus_per_node = o.gpus_per_node;
  if (o.mfu_given) {
    req.mfu = *o.mfu_given;
    req.mfu_source = "given with --mfu";
  }
  const double preset_tokens = model::preset_training(cfg.preset).tokens;
  req.tokens = o.tokens ? *o.tokens : (preset_tokens > 0 ? preset_tokens : 2e9);
  req.gpu = o.gpu;
  req.n_gpus = o.gpus;
  req.seq_len = o.seq;
  req.micro_batch = o.micro_batch;
  req.price_per_hour = o.price;
  req.peak_flops = o.peak_tflops * 1e12;
  req.memory_bytes = o.memory_gb * 1e9;
  std::string strategies;
  train::Plan plan;
  req.recompute = o.recompute == "on";
  req.sharded_master = o.master_weights == "sharded";
  req.zero = o.zero == "1" || (o.zero == "auto" && req.sharded_master);  // sharded masters imply ZeRO-1
  if (o.recompute == "auto" || o.zero == "auto" || o.master_weights == "auto") {
    LM_ASSIGN_OR_RETURN(plan, train::make_cheapest_plan(req, &strategies, o.recompute == "auto", o.zero == "auto",
                                                        o.master_weights == "auto"));
  } else {
    LM_ASSIGN_OR_RETURN(plan, train::make_plan(req));
  }
  std::printf("%s%s", train::format_plan(plan, req).c_str(), strategies.c_str());
  if (!o.model_config.empty())
    std::printf("training settings: preset %s's (tokens, sequence, micro-batch, global batch: docs/gpu.md); the "
                "file's \"train\" section is fit's, not read here: --tokens, --seq, --micro-batch change them\n",
                o.preset.c_str());
  if (!o.sbatch.empty()) {
    if (train::nodes(req) < 2)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--sbatch: a plan of %d GPU(s) runs on one node (--gpus-per-node %d); give more --gpus", o.gpus,
          o.gpus_per_node));
    LM_RETURN_IF_ERROR(write_file_atomic(o.sbatch, train::sbatch_script(plan, req)));
    std::printf("sbatch: wrote %s (sbatch %s)\n", o.sbatch.c_str(), o.sbatch.c_str());
  }
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
  sub->add_option("--config,--model-config", o.model_config,
                  "JSON file in fit --config's format, {\"model\": {...}}: its fields over the preset's shape");
  sub->add_option("--tokens", o.tokens, "training tokens (default: the preset's budget, docs/gpu.md)");
  sub->add_option("--gpu", o.gpu, "GPU of train/device.cpp's table: " + absl::StrJoin(train::gpu_names(), ", ") +
                                       " (h100 is the SXM module, also h100-sxm)")
      ->capture_default_str();
  sub->add_option("--gpus", o.gpus, "number of GPUs (data parallel)")->capture_default_str();
  sub->add_option("--gpus-per-node", o.gpus_per_node, "GPUs in one node: more --gpus means several nodes")
      ->capture_default_str();
  sub->add_option("--sbatch", o.sbatch, "write a Slurm batch file for a multi-node plan to this path");
  sub->add_option("--recompute", o.recompute,
                  "activation recompute per block: auto (only where plain data parallel does not fit), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  sub->add_option("--zero", o.zero,
                  "ZeRO-1, AdamW's moments sharded over the GPUs: auto (only where plain data parallel does not "
                  "fit), 0 or 1; e.g. lmtrain plan --preset 1b --gpus 8 --zero 1")
      ->check(CLI::IsMember({"auto", "0", "1"}))
      ->capture_default_str();
  sub->add_option("--master-weights", o.master_weights,
                  "the distributed optimizer (fit --zero 1 --master-weights sharded): bf16 working weights, the fp32 "
                  "masters sharded like the moments; auto (only where ZeRO-1 does not reach a useful micro-batch), "
                  "whole or sharded (needs --zero 1 and --gpus > 1)")
      ->check(CLI::IsMember({"auto", "whole", "sharded"}))
      ->capture_default_str();
  sub->add_option("--seq-len,--seq", o.seq, "sequence length (default: the preset's training sequence, docs/gpu.md)");
  sub->add_option("--micro-batch", o.micro_batch,
                  "micro-batch per GPU (default: the preset's when it fits, else the largest that fits)");
  sub->add_option("--mfu", o.mfu_given,
                  "model FLOPs utilisation to price the run at, a fraction (default 0.4, an assumption: the plan "
                  "says so)");
  sub->add_option("--price-per-hour,--price", o.price, "dollars per GPU-hour (prints the cost)");
  sub->add_option("--peak-tflops", o.peak_tflops, "override the table's dense bf16 peak (TFLOP/s)");
  sub->add_option("--memory-gb", o.memory_gb, "override the table's memory per GPU (GB)");
  sub->add_option("--hours", o.hours, "wall time of a finished run: prints the MFU it implies");
  sub->footer(
      "Examples:\n"
      "  lmtrain plan --preset 400m --tokens 2e9 --gpu h100 --mfu 0.4 --price-per-hour 3\n"
      "  lmtrain plan --preset 400m --tokens 2e9 --gpu h100 --hours 54.6 --price 3   # the reference report's run\n"
      "  lmtrain plan --preset 1b --tokens 20e9 --gpu h100 --gpus 8\n"
      "  lmtrain plan --preset 1b --config docs/models/llama-7b.json --gpus 8 --seq 2048   # 7B: the distributed "
      "optimizer + recompute\n"
      "  lmtrain plan --preset 1b --gpus 8 --zero 1 --master-weights sharded --recompute off   # one strategy, as asked\n"
      "  lmtrain plan --preset 1b --gpus 32 --sbatch lmforge.sbatch   # 4 nodes: torchrun --nnodes 4, a Slurm file\n"
      "  lmtrain plan --preset 400m --config my-model.json   # {\"model\": {\"n_layers\": 32}}, as fit --config\n"
      "  lmtrain plan --preset 400m --gpu h100-pcie --micro-batch 64   # says whether it fits, and what does\n"
      "The last two lines are the 'lmtrain fit' and 'docker run' commands that train what the plan assumes.");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_plan(o); }});
}

}  // namespace lm::app
