// lmtrain fit: pretrain on prepared shards. Precedence: preset < --config file < flags.
#include <filesystem>
#include <optional>

#include "app/commands.h"
#include "app/fit_flags.h"
#include "core/config.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "runtime/runtime.h"
#include "data/sampler.h"
#include "tokenizer/tokenizer.h"
#include "train/data_source.h"
#include "train/device.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace lm::app {
namespace fs = std::filesystem;
namespace {

struct FitOptions {
  std::string data, preset = "small", out, config, tokenizer;
  std::string init_from;      // exported HF folder whose weights start the run
  bool resume = false, force = false;
  int nproc = 0;              // >1: start that many local ranks (no launcher needed)
  int dist_timeout_s = 300;   // collective timeout: a dead rank fails the others loudly
  bool ddp_post_backward = false;        // all-reduce after backward instead of overlapped
  std::optional<double> ddp_bucket_mb;   // gradient bucket cap
  train::TrainOverrides flags;  // unset = keep the preset's or the config file's value
};

// The --config file: {"model": {...}, "train": {...}}, both optional, strict.
struct RunFile {
  model::ModelConfig model;
  train::TrainConfig train;
  template <class V>
  void visit(V& v) {
    v("model", model);
    v("train", train);
  }
};

absl::Status copy_tokenizer(const std::string& from, const std::string& run_dir) {
  const fs::path dst = RunFolder(run_dir).tokenizer();
  std::error_code ec;
  fs::create_directories(dst, ec);
  for (const char* f : {"spm.model", "tokenizer.json"}) {
    LM_ASSIGN_OR_RETURN(std::string bytes, read_file((fs::path(from) / f).string()));
    LM_RETURN_IF_ERROR(write_file_atomic((dst / f).string(), bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status run_fit(const FitOptions& o) {
  if (o.data.empty() || o.out.empty()) return absl::InvalidArgumentError("fit needs --data and --out");
  // From here on SIGINT/SIGTERM only set a flag: the loop finishes its step and checkpoints.
  install_stop_handlers();
  LM_ASSIGN_OR_RETURN(train::DistEnv env, train::dist_env_from_environment());
  // Precedence: the preset's shape and training defaults < --config < flags.
  RunFile rf;
  LM_ASSIGN_OR_RETURN(rf.model, model::preset(o.preset));
  rf.train = train::preset_train_config(o.preset);
  if (!o.config.empty()) {
    LM_RETURN_IF_ERROR(load_config_file(o.config, rf));
    LM_ASSIGN_OR_RETURN(Json file, read_json_file(o.config));
    if (file.contains("train")) train::clear_shadowed(file["train"], rf.train);
  }
  auto& tc = rf.train;
  o.flags.apply(tc);
  if (global_options().threads > 0) tc.threads = global_options().threads;
  // auto device/dtype before rank_device; said in the first lines, with TF32 set process-wide.
  const std::string hardware = train::resolve_hardware(tc, torch::cuda::is_available());
  if (tc.device == "cuda") train::set_tf32(tc.tf32);
  if (env.rank == 0) log_info("%s", hardware);
  if (o.ddp_post_backward) tc.ddp_overlap = false;
  if (o.ddp_bucket_mb) tc.ddp_bucket_mb = *o.ddp_bucket_mb;
  // This rank's GPU (cuda:LOCAL_RANK) becomes the current device before any other CUDA call.
  LM_ASSIGN_OR_RETURN(const torch::Device dev,
                      train::rank_device(env, tc.device == "cuda" ? torch::kCUDA : torch::kCPU));
  std::unique_ptr<train::Comm> comm;
  if (env.active()) {
    // The device picks the backend: NCCL for cuda (when LibTorch has it), Gloo for cpu.
    LM_ASSIGN_OR_RETURN(comm, train::Comm::connect(env, dev, std::chrono::seconds(o.dist_timeout_s)));
    // Only rank 0 talks to people.
    if (env.rank != 0) init_output(/*quiet=*/true);
  }

  // The run folder first: a wrong --resume/--force is the cheapest mistake to name.
  const RunFolder run(o.out);
  LM_RETURN_IF_ERROR(run.check_policy(o.resume, o.force));
  LM_ASSIGN_OR_RETURN(data::ShardSet set, data::ShardSet::open(o.data));
  // The tokenizer the shards were made with: --tokenizer, else the one recorded by prepare,
  // else the copy inside the run folder (resume).
  std::string tok_dir = o.tokenizer;
  if (tok_dir.empty() && o.resume) tok_dir = run.tokenizer();
  if (tok_dir.empty()) tok_dir = set.manifest().tokenizer_dir;
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(tok_dir));
  LM_RETURN_IF_ERROR(set.check_tokenizer(tok.hash(), tok.vocab_size()));
  rf.model.vocab_size = tok.vocab_size();

  train::FitRequest req;
  req.run_dir = o.out;
  req.resume = o.resume;
  req.init_from = o.init_from;
  req.force = o.force;
  req.model = rf.model;
  req.train = tc;
  req.tokenizer_hash = tok.hash();
  req.world_size = env.world;
  req.rank = env.rank;
  req.local_rank = env.local_rank;
  req.comm = comm.get();
  req.data_info = {{"shards", fs::absolute(o.data).string()}, {"tokenizer", fs::absolute(tok_dir).string()}};
  LM_RETURN_IF_ERROR(model::validate(req.model));
  LM_RETURN_IF_ERROR(train::resolve(req.train, req.model, req.world_size));

  data::SamplerConfig sc;
  sc.batch = req.train.micro_batch;
  sc.seq_len = req.train.seq_len;
  sc.seed = req.train.seed;
  sc.rank = env.rank;
  sc.world = env.world;
  LM_ASSIGN_OR_RETURN(data::BatchSampler sampler, data::BatchSampler::create(set, sc));
  train::SamplerSource source(std::move(sampler));
  LM_ASSIGN_OR_RETURN(train::ValSets val, train::load_validation(set, req.train.seq_len, req.train.eval_windows));

  if (!o.resume && env.rank == 0) {
    std::error_code ec;
    fs::create_directories(o.out, ec);
    LM_RETURN_IF_ERROR(copy_tokenizer(tok_dir, o.out));
  }
  LM_ASSIGN_OR_RETURN(train::FitSummary sum, train::fit(req, source, val));
  if (env.rank == 0) std::printf("%s\n", sum.summary().c_str());
  if (sum.stop_signal != 0) global_options().exit_code = 128 + sum.stop_signal;
  return absl::OkStatus();
}

void add_fit(CLI::App& app, Registry& reg) {
  static FitOptions o;
  auto* sub = app.add_subcommand("fit", "pretrain a model on prepared token shards");
  sub->add_option("--data", o.data, "shards folder written by 'lmtrain prepare'")->required();
  sub->add_option("--out", o.out, "run folder (config.json, metrics.jsonl, checkpoints/)")->required();
  sub->add_option("--preset", o.preset, "model preset: tiny, small, 124m, 400m, 1b")->capture_default_str();
  sub->add_option("--config", o.config, "JSON file {\"model\": {...}, \"train\": {...}} over the preset");
  sub->add_option("--tokenizer", o.tokenizer, "tokenizer folder (default: the one recorded by prepare)");
  sub->add_option("--init-from", o.init_from, "start from the weights of a folder written by 'lmtrain export' (same architecture)");
  sub->add_flag("--resume", o.resume, "continue from the run folder's latest checkpoint");
  sub->add_flag("--force", o.force, "start over in an existing run folder (deletes its checkpoints)");
  add_train_flags(sub, o.flags);
  sub->add_option("--nproc", o.nproc, "data-parallel ranks on this machine (or launch with torchrun/srun)");
  sub->add_option("--dist-timeout", o.dist_timeout_s, "seconds before a collective gives up")->capture_default_str();
  sub->add_flag("--ddp-post-backward", o.ddp_post_backward,
                "all-reduce gradients after backward instead of overlapped with it (train.ddp_overlap=false)");
  sub->add_option("--ddp-bucket-mb", o.ddp_bucket_mb, "gradient all-reduce bucket cap in MiB (default 25)");
  sub->footer(
      "Examples:\n"
      "  lmtrain fit --data shards/ --preset small --out runs/small --steps 600\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m   # GPU: cuda, bf16, TF32, the preset's batch/lr\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m --tokens 2e9 --micro-batch 8   # flags win\n"
      "  lmtrain fit --data shards/ --out runs/small --resume      # after a kill or preemption\n"
      "  lmtrain fit --data shards/ --preset tiny --out runs/dp --nproc 2   # 2 ranks, Gloo\n"
      "  torchrun --no-python --nproc-per-node 8 lmtrain fit --data shards/ --preset 400m --out runs/400m\n"
      "Defaults: --device auto (cuda when visible), --dtype auto (bf16 on cuda), TF32 on; each preset's batch,\n"
      "lr, warmup and checkpoint period are in docs/gpu.md ('Preset defaults'); 'lmtrain plan' prints them.\n"
      "Signals: SIGINT/SIGTERM finish the step, checkpoint and exit 130/143.");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_fit(o); }});
}

int maybe_launch_fit(int argc, char** argv) {
  // `lmtrain fit ... --nproc N`: this process becomes the launcher of N ranks.
  int nproc = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--nproc") nproc = std::atoi(argv[i + 1]);
  }
  if (nproc <= 1 || std::getenv("WORLD_SIZE") != nullptr) return -1;
  const char* port = std::getenv("MASTER_PORT");
  return train::launch_local_ranks(nproc, argc, argv, port ? std::atoi(port) : 29500);
}

}  // namespace lm::app
