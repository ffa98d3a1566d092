// lmtrain fit: pretrain on prepared shards. Precedence: preset < --config file < flags.
#include <filesystem>
#include <optional>

#include "absl/strings/str_join.h"
#include "app/commands.h"
#include "app/fit_flags.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "runtime/runtime.h"
#include "data/sampler.h"
#include "tokenizer/tokenizer.h"
#include "train/data_source.h"
#include "train/device.h"
#include "train/distributed.h"
#include "train/resume.h"
#include "train/trainer.h"

namespace lm::app {
namespace fs = std::filesystem;
namespace {

struct FitOptions {
  std::string data, out, config, tokenizer;
  std::optional<std::string> preset;  // unset: "small" for a new run, the run's own on --resume
  std::string init_from;      // exported HF folder whose weights start the run
  bool resume = false, force = false;
  bool allow_new_data = false;  // --resume on other shards: continued pretraining
  int nproc = 0;              // >1: start that many local ranks (no launcher needed)
  int dist_timeout_s = 300;   // collective timeout: a dead rank fails the others loudly
  bool ddp_post_backward = false;        // all-reduce after backward instead of overlapped
  train::TrainOverrides flags;  // --set and the short flags, in command-line order (app/fit_flags.h)
};

// The --config file: {"model": {...}, "train": {"batch": {...}, "optimizer": {...}, ...}}, both
// optional, strict (train/config.h has the sections).
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

// ---- Resume: config.json is the truth --------------------------------------------------------

// The run's config.json, the base a resume starts from.
struct ResumeBase {
  RunFile rf;
  Json data = Json::object();  // "data": shards, tokenizer, shards_id (and earlier_shards)
  std::string path;
};

absl::StatusOr<ResumeBase> read_resume_base(const RunFolder& run) {
  ResumeBase b;
  b.path = run.config();
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(b.path));
  if (!j.contains("model") || !j.contains("train"))
    return absl::DataLossError(b.path + ": no \"model\" or \"train\" section (not written by 'lmtrain fit'?)");
  LM_RETURN_IF_ERROR(annotate(from_json(j["model"], b.rf.model, "model"), b.path));
  LM_RETURN_IF_ERROR(annotate(from_json(j["train"], b.rf.train, "train"), b.path));
  if (j.contains("data") && j["data"].is_object()) b.data = j["data"];
  return b;
}

absl::Status apply_flags(const FitOptions& o, train::TrainConfig& tc) {
  LM_RETURN_IF_ERROR(o.flags.apply(tc));
  if (global_options().threads > 0) tc.hardware.threads = global_options().threads;
  if (o.ddp_post_backward) tc.distributed.overlap = false;
  return absl::OkStatus();
}

// What this invocation asks for: a new run starts from the preset's shape and training defaults,
// a resume from the run's config.json; then --preset (shape only on a resume), --config and the
// flags over it. A resume's stop_at_step is this invocation's only.
absl::StatusOr<RunFile> requested_config(const FitOptions& o, const ResumeBase* base) {
  RunFile rf;
  if (base != nullptr) {
    rf = base->rf;
    rf.train.stop_at_step = -1;
  } else {
    rf.train = train::preset_train_config(o.preset.value_or("small"));
  }
  if (base == nullptr || o.preset) {
    const int64_t vocab = rf.model.vocab_size;
    LM_ASSIGN_OR_RETURN(rf.model, model::preset(o.preset.value_or("small")));
    if (base != nullptr) rf.model.vocab_size = vocab;  // the run's tokenizer decides it, as at its start
  }
  if (!o.config.empty()) {
    LM_RETURN_IF_ERROR(load_config_file(o.config, rf));
    LM_ASSIGN_OR_RETURN(Json file, read_json_file(o.config));
    if (file.contains("train")) train::clear_shadowed(file["train"], rf.train);
  }
  LM_RETURN_IF_ERROR(apply_flags(o, rf.train));
  return rf;
}

// Which flag (or file) set a field this time, for the refusal message.
train::SourceOf source_of(const FitOptions& o) {
  return [&o](const std::string& field) -> std::string {
    std::vector<std::string> by;
    if (const std::string flag = o.flags.source_of(field); !flag.empty()) by.push_back(flag);
    if (field.rfind("model.", 0) == 0 && o.preset) by.push_back("--preset " + *o.preset);
    if (!o.config.empty()) by.push_back("--config " + o.config);
    return absl::StrJoin(by, " or ");
  };
}

// The step of the latest checkpoint; 0 when the run was killed before its first one.
absl::StatusOr<int64_t> done_step(const RunFolder& run) {
  auto name = run.latest_name();
  if (absl::IsNotFound(name.status())) return 0;
  LM_RETURN_IF_ERROR(name.status());
  auto step = RunFolder::parse_step_name(*name);
  if (!step.ok()) return annotate(step.status(), run.latest());
  return *step;
}

// Compares the request with the run's config (train::plan_resume); says what re-planning did.
// Returns true when the run is already finished (nothing to train: said, exit 0).
absl::StatusOr<bool> plan_the_resume(const FitOptions& o, const RunFolder& run, const ResumeBase& base, int world,
                                     train::FitRequest& req) {
  LM_ASSIGN_OR_RETURN(const int64_t done, done_step(run));
  auto plan = train::plan_resume(base.rf.model, base.rf.train, req.model, req.train, done, world, source_of(o));
  if (!plan.ok()) return annotate(plan.status(), run.dir());
  for (const auto& note : plan->notes) log_info("%s", note);
  req.train = plan->train;
  if (plan->finished && req.rank == 0)
    std::printf("%s: the run is finished (step %lld of %lld); nothing to train. Extend it with a larger --steps "
                "or --tokens (re-plans the schedule)\n",
                run.dir().c_str(), static_cast<long long>(done), static_cast<long long>(plan->train.steps));
  return plan->finished;
}

// The identity of a shards folder wherever it lies: its shard list and tokenizer.
std::string shards_id(const data::ShardSet& set) {
  const std::string key = data::manifest_to_json(set.manifest())["shards"].dump() + set.tokenizer_hash();
  return hex64(fnv1a64(key.data(), key.size()));
}

// A resume trains on the run's own shards (found by content, so a moved folder is fine) unless
// --allow-new-data names continued pretraining; config.json then records the earlier shards.
absl::Status check_resume_data(const FitOptions& o, const ResumeBase& base, train::FitRequest& req) {
  Json data = base.data;
  const std::string now_id = req.data_info["shards_id"];
  const bool same = data.contains("shards_id")
                        ? data["shards_id"] == now_id
                        : fs::weakly_canonical(data.value("shards", "")) == fs::weakly_canonical(req.data_info["shards"].get<std::string>());
  if (!same && !o.allow_new_data)
    return absl::FailedPreconditionError(absl::StrCat(
        "--data ", o.data, ": not the shards this run trains on (", data.value("shards", "?"),
        "); drop --data to continue on them, or add --allow-new-data for continued pretraining on these "
        "(weights and optimizer state kept, the data order starts fresh)"));
  if (!same) {
    data["earlier_shards"].push_back(data.value("shards", ""));
    data["shards"] = req.data_info["shards"];
    req.new_data = true;
    log_info("continued pretraining on %s (earlier: %s)", data["shards"].get<std::string>(),
             data["earlier_shards"].back().get<std::string>());
  } else if (!fs::exists(data.value("shards", ""))) {
    data["shards"] = req.data_info["shards"];  // the same shards, moved
  }
  data["shards_id"] = now_id;
  req.data_info = data;
  return absl::OkStatus();
}

// Device and ranks: auto device/dtype resolved and said in the first lines (TF32 set process-wide),
// this rank's GPU (cuda:LOCAL_RANK) made current before any other CUDA call, then the process
// group when launched as several ranks (NCCL for cuda when LibTorch has it, Gloo for cpu).
absl::StatusOr<std::unique_ptr<train::Comm>> set_up_device(const FitOptions& o, const train::DistEnv& env,
                                                           train::TrainConfig& tc) {
  const std::string hardware = train::resolve_hardware(tc, torch::cuda::is_available());
  if (tc.hardware.device == "cuda") train::set_tf32(tc.hardware.tf32);
  if (env.rank == 0) log_info("%s", hardware);
  LM_ASSIGN_OR_RETURN(const torch::Device dev,
                      train::rank_device(env, tc.hardware.device == "cuda" ? torch::kCUDA : torch::kCPU));
  std::unique_ptr<train::Comm> comm;
  if (env.active()) {
    LM_ASSIGN_OR_RETURN(comm, train::Comm::connect(env, dev, std::chrono::seconds(o.dist_timeout_s)));
    if (env.rank != 0) init_output(/*quiet=*/true);  // only rank 0 talks to people
  }
  return comm;
}

}  // namespace

namespace {

// How often the run repeats each language and source: the passes line of 'lmtrain prepare
// --plan-tokens', for this run's steps x tokens per step (issue #21).
void log_passes(const data::BatchSampler& sampler, const train::TrainConfig& tc, int world) {
  const double tokens = static_cast<double>(train::tokens_per_step(tc, world)) * static_cast<double>(tc.steps);
  const auto passes = data::compute_passes(data::mixture_parts(sampler), tokens);
  log_info("%s", data::format_passes(passes, tokens, "fit: steps x tokens per step"));
  data::warn_passes(passes, tokens, "fit");
}

// The tokenizer as the trainer's text codec; `tok` outlives the fit that uses it.
train::TextCodec text_codec(const tokenizer::Tokenizer& tok) {
  return {[&tok](std::string_view t) { return tok.encode(t); },
          [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); }, tok.bos_id(), tok.eos_id()};
}

}  // namespace

absl::Status run_fit(const FitOptions& o) {
  if (o.out.empty()) return absl::InvalidArgumentError("fit needs --out");
  if (o.data.empty() && !o.resume) return absl::InvalidArgumentError("fit needs --data (the shards folder of 'lmtrain prepare')");
  if (o.allow_new_data && !o.resume)
    return absl::InvalidArgumentError("--allow-new-data continues a run on new shards and needs --resume");
  // From here on SIGINT/SIGTERM only set a flag: the loop finishes its step and checkpoints.
  install_stop_handlers();
  LM_ASSIGN_OR_RETURN(train::DistEnv env, train::dist_env_from_environment());
  // The run folder first: a wrong --resume/--force is the cheapest mistake to name.
  const RunFolder run(o.out);
  LM_RETURN_IF_ERROR(run.check_policy(o.resume, o.force));
  std::optional<ResumeBase> base;
  if (o.resume) {
    LM_ASSIGN_OR_RETURN(base, read_resume_base(run));
  }
  LM_ASSIGN_OR_RETURN(RunFile rf, requested_config(o, base ? &*base : nullptr));
  auto& tc = rf.train;
  LM_ASSIGN_OR_RETURN(std::unique_ptr<train::Comm> comm, set_up_device(o, env, tc));

  const std::string data_dir = o.data.empty() && base ? base->data.value("shards", "") : o.data;
  LM_ASSIGN_OR_RETURN(data::ShardSet set, data::ShardSet::open(data_dir));
  // The tokenizer the shards were made with: --tokenizer, else the one recorded by prepare,
  // else the copy inside the run folder (resume).
  std::string tok_dir = o.tokenizer;
  if (tok_dir.empty() && o.resume) tok_dir = run.tokenizer();
  if (tok_dir.empty()) tok_dir = set.tokenizer_path();
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(tok_dir));
  LM_RETURN_IF_ERROR(set.check_tokenizer(tok));  // hash, vocabulary and framing
  rf.model.vocab_size = tok.vocab_size();

  train::FitRequest req;
  req.run_dir = o.out;
  req.resume = o.resume;
  req.init_from = o.init_from;
  req.force = o.force;
  req.model = rf.model;
  req.train = tc;
  req.tokenizer_hash = tok.hash();
  req.codec = text_codec(tok);  // text samples at validation (train/samples.h)
  req.world_size = env.world;
  req.rank = env.rank;
  req.local_rank = env.local_rank;
  req.comm = comm.get();
  req.data_info = {{"shards", fs::absolute(data_dir).string()},
                   {"tokenizer", fs::absolute(tok_dir).string()},
                   {"shards_id", shards_id(set)}};
  LM_RETURN_IF_ERROR(model::validate(req.model));
  if (base) {
    LM_ASSIGN_OR_RETURN(const bool finished, plan_the_resume(o, run, *base, env.world, req));
    if (finished) return absl::OkStatus();
    LM_RETURN_IF_ERROR(check_resume_data(o, *base, req));
  }
  LM_RETURN_IF_ERROR(train::resolve(req.train, req.model, req.world_size));

  data::SamplerConfig sc;
  sc.batch = req.train.batch.micro_batch;
  sc.seq_len = req.train.batch.seq_len;
  sc.seed = req.train.seed;
  sc.rank = env.rank;
  sc.world = env.world;
  LM_ASSIGN_OR_RETURN(data::BatchSampler sampler, data::BatchSampler::create(set, sc));
  if (env.rank == 0) log_passes(sampler, req.train, env.world);
  train::SamplerSource source(std::move(sampler));
  LM_ASSIGN_OR_RETURN(train::ValSets val, train::load_validation(set, req.train.batch.seq_len, req.train.eval.windows));

  if (!o.resume && env.rank == 0) {
    std::error_code ec;
    fs::create_directories(o.out, ec);
    LM_RETURN_IF_ERROR(copy_tokenizer(tok_dir, o.out));
  }
  LM_ASSIGN_OR_RETURN(train::FitSummary sum, train::fit(req, source, val));
  if (env.rank == 0) std::printf("%s\n", sum.summary().c_str());
  if (env.rank == 0 && !sum.val_loss.empty() && !val.empty() && !val.begin()->second.empty())  // docs/eval.md
    std::printf("  (val loss: the first %zu windows of %zu tokens per language; 'lmeval nll' scores every "
                "validation token, in windows of %ld: its figures differ)\n",
                val.begin()->second.size(), val.begin()->second.front().size() - 1,
                static_cast<long>(req.model.max_seq_len));
  if (sum.stop_signal != 0) global_options().exit_code = 128 + sum.stop_signal;
  return absl::OkStatus();
}

void add_fit(CLI::App& app, Registry& reg) {
  static FitOptions o;
  auto* sub = app.add_subcommand("fit", "pretrain a model on prepared token shards");
  sub->add_option("--data", o.data, "shards folder written by 'lmtrain prepare' (on --resume: the run's own by default)");
  sub->add_option("--out", o.out, "run folder (config.json, metrics.jsonl, checkpoints/)")->required();
  sub->add_option("--preset", o.preset, "model preset: tiny, small, 124m, 400m, 1b (default small; --resume keeps the run's)");
  sub->add_option("--config", o.config, "JSON file {\"model\": {...}, \"train\": {\"optimizer\": {...}, ...}} over the preset");
  sub->add_option("--tokenizer", o.tokenizer, "tokenizer folder (default: the one recorded by prepare)");
  sub->add_option("--init-from", o.init_from, "start from the weights of a folder written by 'lmtrain export' (same architecture)");
  sub->add_flag("--resume", o.resume,
                "continue the run with its own config.json from its latest checkpoint (step 0 if none); flags that "
                "would change the run are refused, a larger --steps/--tokens re-plans the schedule");
  sub->add_flag("--allow-new-data", o.allow_new_data,
                "with --resume and another --data: continued pretraining on new shards (same tokenizer), keeping "
                "weights, optimizer state and step; the data order starts fresh");
  sub->add_flag("--force", o.force, "start over in an existing run folder (deletes its checkpoints)");
  add_train_flags(sub, o.flags);
  sub->add_option("--nproc", o.nproc, "data-parallel ranks on this machine (or launch with torchrun/srun)");
  sub->add_option("--dist-timeout", o.dist_timeout_s, "seconds before a collective gives up")->capture_default_str();
  sub->add_flag("--ddp-post-backward", o.ddp_post_backward,
                "all-reduce gradients after backward instead of overlapped with it (train.distributed.overlap=false)");
  sub->footer(
      "Examples:\n"
      "  lmtrain fit --data shards/ --preset small --out runs/small --steps 600\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m   # GPU: cuda, bf16, TF32, the preset's batch/lr\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m --tokens 2e9 --micro-batch 8   # flags win\n"
      "  lmtrain fit --data shards/ --preset tiny --out runs/wsd --set schedule.kind=wsd --set optimizer.beta2=0.99\n"
      "  lmtrain fit --out runs/small --resume                    # after a kill or preemption: the run's own settings\n"
      "  lmtrain fit --out runs/small --resume --steps 1200       # extend a run (re-plans the lr schedule)\n"
      "  lmtrain fit --out runs/small --resume --data shards-v2/ --allow-new-data --steps 2000   # continued pretraining\n"
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
