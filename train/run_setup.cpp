#include "train/run_setup.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "data/sampler.h"
#include "model/hf_import.h"
#include "model/vocab_extension.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/preflight.h"
#include "train/resume.h"
#include "train/rank_agreement.h"
#include "train/resume_point.h"

namespace lm::train {
namespace fs = std::filesystem;

absl::StatusOr<ResumeMode> parse_resume_mode(const std::string& text) {
  if (text.empty() || text == "no") return ResumeMode::kNo;
  if (text == "yes") return ResumeMode::kYes;
  if (text == "auto") return ResumeMode::kAuto;
  return absl::InvalidArgumentError("--resume: expected no value (continue the run) or 'auto' (continue it when "
                                    "there is one, else start it), got '" + text + "'");
}

namespace {

// The --config file: {"model": {...}, "train": {"batch": {...}, "optimizer": {...}, ...}}, both
// optional, strict (train/config.h has the sections).
struct RunFile {
  model::ModelConfig model;
  TrainConfig train;
  template <class V>
  void visit(V& v) {
    v("model", model);
    v("train", train);
  }
};

// ---- 1. The run folder and the resume mode ---------------------------------------------------

// Whether this invocation continues a run. Every rank decides before the process group connects
// (a rendezvous of all ranks), and rank 0 writes the folder only after it: all ranks see the
// same folder.
absl::StatusOr<bool> decide_resume(const FitOptions& o, const RunFolder& run) {
  if (o.resume != ResumeMode::kAuto) {
    LM_RETURN_IF_ERROR(run.check_policy(o.resume == ResumeMode::kYes, o.force));
    return o.resume == ResumeMode::kYes;
  }
  if (o.force)
    return absl::InvalidArgumentError("--resume auto continues a run and --force starts it over: pass one");
  const RunFolder::Contents c = run.contents();
  if (c.holds == RunFolder::Holds::kOther)
    return absl::FailedPreconditionError(absl::StrCat(
        run.dir(), ": not a run folder and not empty (holds ", absl::StrJoin(c.other, ", "),
        "; no config.json); --resume auto starts a run only in a new or empty folder: pick another --out"));
  if (c.holds == RunFolder::Holds::kNothing) log_info("%s: no run there yet; starting it (--resume auto)", run.dir());
  return c.holds == RunFolder::Holds::kRun;
}

// The run lock, held by `s` until the fit ends; a lock file a dead process left is taken over.
absl::Status lock_run(const RunFolder& run, RunSetup& s) {
  LM_ASSIGN_OR_RETURN(s.lock, RunLock::acquire(run.dir()));
  const Json& was = s.lock.previous_holder();
  if (was.contains("pid"))
    log_info("%s: took over the lock of pid %s on %s, which no longer holds it (it was killed or crashed)",
             s.lock.path(), was["pid"].dump(), was.value("host", "?"));
  return absl::OkStatus();
}

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

// ---- 2. The config ------------------------------------------------------------------------------

absl::Status apply_flags(const FitOptions& o, TrainConfig& tc) {
  LM_RETURN_IF_ERROR(o.flags.apply(tc));
  if (o.threads > 0) tc.hardware.threads = o.threads;
  if (o.ddp_post_backward) tc.distributed.overlap = false;
  return absl::OkStatus();
}

// --init-from: a new run takes the checkpoint's model (model/hf_import.h), not the preset's shape;
// --preset then picks only the training defaults, and names the model when it has the preset's shape.
absl::StatusOr<model::ModelConfig> checkpoint_model(const FitOptions& o) {
  LM_ASSIGN_OR_RETURN(model::ModelConfig m, model::read_hf_config(o.init_from));
  if (o.preset) {
    LM_ASSIGN_OR_RETURN(model::ModelConfig p, model::preset(*o.preset));
    m.preset = p.preset;
    p.init_std = m.init_std;
    if (to_json(m) != to_json(p)) m.preset = "custom";
  }
  log_info("--init-from %s: %s model, %d layers, d_model %d, %d/%d heads of %d, vocab %d, %s parameters", o.init_from,
           m.architecture, m.n_layers, m.d_model, m.n_heads, m.n_kv_heads, m.head_dim(), m.vocab_size,
           format_count(static_cast<double>(model::param_count(m))));
  return m;
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
    rf.train = preset_train_config(o.preset.value_or("small"));
  }
  if (base == nullptr || o.preset) {
    const int64_t vocab = rf.model.vocab_size;
    LM_ASSIGN_OR_RETURN(rf.model, model::preset(o.preset.value_or("small")));
    if (base != nullptr) rf.model.vocab_size = vocab;  // the run's tokenizer decides it, as at its start
  }
  if (base == nullptr && !o.init_from.empty()) {
    LM_ASSIGN_OR_RETURN(rf.model, checkpoint_model(o));
  }
  if (!o.config.empty()) {
    LM_RETURN_IF_ERROR(load_config_file(o.config, rf));
    LM_ASSIGN_OR_RETURN(Json file, read_json_file(o.config));
    if (file.contains("train")) clear_shadowed(file["train"], rf.train);
  }
  LM_RETURN_IF_ERROR(apply_flags(o, rf.train));
  return rf;
}

// Which flag (or file) set a field this time, for the refusal message.
SourceOf source_of(const FitOptions& o) {
  return [&o](const std::string& field) -> std::string {
    std::vector<std::string> by;
    if (const std::string flag = o.flags.source_of(field); !flag.empty()) by.push_back(flag);
    if (field.rfind("model.", 0) == 0 && o.preset) by.push_back("--preset " + *o.preset);
    if (!o.config.empty()) by.push_back("--config " + o.config);
    return absl::StrJoin(by, " or ");
  };
}

// A resume on another number of ranks keeps the rows of a step (micro_batch x grad_accum x ranks):
// grad_accum scales by the ratio of the rank counts (each GPU keeps its micro-batch and memory), or,
// where that is not whole, micro_batch does. The run's side changes alike, so plan_resume sees no
// change; the trainer re-deals the data cursor (check_resume_compatible). --grad-accum or
// --micro-batch given: the user's layout, checked by the trainer.
absl::Status reshard_batch(const FitOptions& o, const std::string& ckpt, int world, TrainConfig& run, TrainConfig& now) {
  if (ckpt.empty()) return absl::OkStatus();
  LM_ASSIGN_OR_RETURN(Json state, read_trainer_state(ckpt));
  const int64_t was = state.value("world_size", int64_t{1});
  if (!o.flags.source_of("train.batch.grad_accum").empty() || !o.flags.source_of("train.batch.micro_batch").empty()) {
    if (was == world) return absl::OkStatus();
    run.batch.micro_batch = now.batch.micro_batch;  // the user's layout; the trainer checks its rows per step
    run.batch.grad_accum = now.batch.grad_accum;
    return absl::OkStatus();
  }
  // The checkpoint's own layout (config.json may already hold a later start's that stopped before
  // its first checkpoint).
  const Json batch = state.contains("config") ? state["config"]["train"].value("batch", Json()) : Json();
  const int64_t micro = batch.is_object() ? batch.value("micro_batch", run.batch.micro_batch) : run.batch.micro_batch;
  const int64_t accum = batch.is_object() ? batch.value("grad_accum", run.batch.grad_accum) : run.batch.grad_accum;
  const int64_t rows = micro * accum * was;
  if (was == world) {
    now.batch.micro_batch = run.batch.micro_batch = micro;
    now.batch.grad_accum = run.batch.grad_accum = accum;
    return absl::OkStatus();
  }
  if ((accum * was) % world == 0) {
    now.batch.grad_accum = run.batch.grad_accum = accum * was / world;
  } else if (rows % (accum * world) == 0) {
    now.batch.micro_batch = run.batch.micro_batch = rows / (accum * world);
  } else {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the run takes %d rows per step (%d ranks x micro_batch %d x grad_accum %d), which %d ranks cannot "
        "share evenly; resume on a number of ranks that divides %d, or give --micro-batch and --grad-accum whose "
        "product with %d is %d",
        ckpt, rows, was, micro, accum, world, rows, world, rows));
  }
  log_info("resuming a %d-rank run on %d ranks: micro_batch %d x grad_accum %d per rank (was %d x %d), the same %d "
           "rows per step",
           static_cast<int>(was), world, now.batch.micro_batch, now.batch.grad_accum, micro, accum, rows);
  return absl::OkStatus();
}

// Compares the request with the run's config (plan_resume) and logs what re-planning did.
absl::Status plan_the_resume(const FitOptions& o, const RunFolder& run, const ResumeBase& base, RunSetup& s) {
  // The newest checkpoint that verifies (train/resume_point.h); step 0 when there is none yet.
  LM_ASSIGN_OR_RETURN(s.req.resume_point, choose_resume_point(run.dir()));
  s.done_step = s.req.resume_point->step;
  TrainConfig run_train = base.rf.train;
  LM_RETURN_IF_ERROR(reshard_batch(o, s.req.resume_point->checkpoint, s.req.world_size, run_train, s.req.train));
  auto plan = plan_resume(base.rf.model, run_train, s.req.model, s.req.train, s.done_step, s.req.world_size,
                          source_of(o));
  if (!plan.ok()) return annotate(plan.status(), run.dir());
  for (const auto& note : plan->notes) log_info("%s", note);
  s.req.train = plan->train;
  s.finished = plan->finished;
  return absl::OkStatus();
}

// ---- 3. Device and ranks ------------------------------------------------------------------------

// Auto device/dtype resolved (TF32 set process-wide; how they were chosen goes to `hardware`, said
// with the threads once the trainer chose them), this rank's GPU (cuda:LOCAL_RANK) made current
// before any other CUDA call, then the process group when launched as several ranks (NCCL for cuda
// when LibTorch has it, Gloo for cpu).
absl::StatusOr<std::unique_ptr<Comm>> set_up_device(const FitOptions& o, const DistEnv& env, TrainConfig& tc,
                                                    std::string& hardware) {
  hardware = resolve_hardware(tc, torch::cuda::is_available());
  if (tc.hardware.device == "cuda") set_tf32(tc.hardware.tf32);
  LM_ASSIGN_OR_RETURN(const torch::Device dev,
                      rank_device(env, tc.hardware.device == "cuda" ? torch::kCUDA : torch::kCPU));
  std::unique_ptr<Comm> comm;
  if (env.active()) {
    LM_ASSIGN_OR_RETURN(comm, Comm::connect(env, dev, std::chrono::seconds(o.dist_timeout_s)));
    if (env.rank != 0) init_output(/*quiet=*/true);  // only rank 0 talks to people
  }
  return comm;
}

// ---- 4. Shards, tokenizer and the data of a resume -------------------------------------------

// The identity of a shards folder wherever it lies: its shard list and tokenizer.
std::string shards_id(const data::ShardSet& set) {
  const std::string key = data::manifest_to_json(set.manifest())["shards"].dump() + set.tokenizer_hash();
  return hex64(fnv1a64(key.data(), key.size()));
}

// The tokenizer the shards were made with: --tokenizer, else on a resume the run's own copy,
// else the one recorded by prepare. A resume checks the run's copy against config.json first.
absl::StatusOr<std::string> tokenizer_dir(const FitOptions& o, const RunFolder& run, bool resuming,
                                          const data::ShardSet& set) {
  if (resuming) LM_RETURN_IF_ERROR(run.check_tokenizer());
  if (!o.tokenizer.empty()) return o.tokenizer;
  return resuming ? run.tokenizer() : set.tokenizer_path();
}

// A resume trains on the run's own shards (found by content, so a moved folder is fine) unless
// --allow-new-data names continued pretraining; config.json then records the earlier shards.
absl::Status check_resume_data(const FitOptions& o, const ResumeBase& base, FitRequest& req) {
  Json data = base.data;
  const std::string now_id = req.data_info["shards_id"];
  const bool same = data.contains("shards_id")
                        ? data["shards_id"] == now_id
                        : fs::weakly_canonical(data.value("shards", "")) ==
                              fs::weakly_canonical(req.data_info["shards"].get<std::string>());
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

// ---- 5. Data and the folder ---------------------------------------------------------------------

// How often the run repeats each language and source: one line per language by default, the
// table of 'lmtrain prepare --plan-tokens' with every source under -v, for this run's steps x
// tokens per step (issue #21); the warning above ~4 passes always.
void log_passes(const data::BatchSampler& sampler, const TrainConfig& tc, int world) {
  const double tokens = static_cast<double>(tokens_per_step(tc, world)) * static_cast<double>(tc.steps);
  const auto passes = data::compute_passes(data::mixture_parts(sampler), tokens);
  if (detail_enabled()) {
    log_detail("%s", data::format_passes(passes, tokens, "fit: steps x tokens per step"));
  } else {
    std::vector<std::string> langs;
    for (const auto& r : passes)
      if (r.source.empty()) langs.push_back(absl::StrFormat("%s %.2fx", r.lang, r.passes));
    log_info("passes over the data for %s tokens: %s (-v: per source)", format_count(tokens), absl::StrJoin(langs, ", "));
  }
  data::warn_passes(passes, tokens, "fit");
}

}  // namespace

std::string replay_warning(const std::string& init_from, const std::map<std::string, double>& shares) {
  std::error_code ec;
  if (init_from.empty() || !fs::exists(fs::path(init_from) / model::kVocabExtensionFile, ec)) return "";
  const auto en = shares.find("en");
  if (en != shares.end() && en->second > 0) return "";
  std::vector<std::string> langs;
  for (const auto& [lang, p] : shares) langs.push_back(absl::StrFormat("%s %.0f%%", lang, 100 * p));
  return absl::StrCat("--init-from ", init_from, " is an extended checkpoint (lmtrain extend-model) but the shards "
                      "hold no English (", absl::StrJoin(langs, ", "), "): with nothing of the base's language to replay, "
                      "its English degrades as the new tokens train; add an English source to corpus.json (about 25% of the "
                      "tokens, docs/continued-pretraining.md \"English replay\") and re-run lmtrain prepare");
}

namespace {

absl::Status load_data(const data::ShardSet& set, RunSetup& s) {
  data::SamplerConfig sc;
  sc.batch = s.req.train.batch.micro_batch;
  sc.seq_len = s.req.train.batch.seq_len;
  sc.seed = s.req.train.seed;
  sc.rank = s.req.rank;
  sc.world = s.req.world_size;
  LM_ASSIGN_OR_RETURN(data::BatchSampler sampler, data::BatchSampler::create(set, sc));
  if (s.req.rank == 0) log_passes(sampler, s.req.train, s.req.world_size);
  if (s.req.rank == 0 && !s.resuming) {
    std::map<std::string, double> shares;
    for (const auto& lang : sampler.languages()) shares[lang] = sampler.probability(lang);
    if (const std::string w = replay_warning(s.req.init_from, shares); !w.empty()) log_warn("%s", w);
  }
  s.source = std::make_unique<SamplerSource>(std::move(sampler));
  LM_ASSIGN_OR_RETURN(s.val, load_validation(set, s.req.train.batch.seq_len, s.req.train.eval.windows));
  return absl::OkStatus();
}

absl::Status copy_tokenizer(const std::string& from, const RunFolder& run) {
  const fs::path dst = run.tokenizer();
  std::error_code ec;
  fs::create_directories(dst, ec);
  // tokenizer.json and the model file it names: spm.model, or an imported checkpoint's
  // tokenizer.model / hf-tokenizer.json (docs/tokenizer.md, "Foreign tokenizers").
  LM_ASSIGN_OR_RETURN(const std::string model, RunFolder::tokenizer_model_file(from));
  for (const std::string& f : {model, std::string("tokenizer.json")}) {
    LM_ASSIGN_OR_RETURN(std::string bytes, read_file((fs::path(from) / f).string()));
    LM_RETURN_IF_ERROR(write_file_atomic((dst / f).string(), bytes));
  }
  return absl::OkStatus();
}

// The tokenizer as the trainer's text codec; `tok` outlives the fit that uses it.
TextCodec text_codec(const tokenizer::Tokenizer& tok) {
  return {[&tok](std::string_view t) { return tok.encode(t); },
          [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); }, tok.bos_id(), tok.eos_id()};
}

// The request's identity: the run folder, shape and budget, ranks, the tokenizer and shards.
void fill_request(const FitOptions& o, const DistEnv& env, const RunFile& rf, RunSetup& s) {
  FitRequest& req = s.req;
  req.run_dir = o.out;
  req.resume = s.resuming;
  req.init_from = o.init_from;
  req.force = o.force;
  req.model = rf.model;
  // The tokenizer sizes a new run's vocabulary; an imported checkpoint's (and a run's own, on a
  // resume) may be larger: rows no token id reaches, as Qwen2's padded embedding.
  const bool model_sized = s.resuming || !o.init_from.empty();
  req.model.vocab_size = model_sized ? std::max<int64_t>(rf.model.vocab_size, s.tok.vocab_size()) : s.tok.vocab_size();
  req.train = rf.train;
  req.tokenizer_hash = s.tok.hash();
  req.codec = text_codec(s.tok);  // text samples at validation (train/samples.h)
  req.world_size = env.world;
  req.rank = env.rank;
  req.local_rank = env.local_rank;
  req.comm = s.comm.get();
}

}  // namespace

std::string no_checkpoint_warning(const TrainConfig& tc, int64_t from_step) {
  const auto& c = tc.checkpoint;
  const bool stops_first = tc.stop_at_step > from_step && tc.stop_at_step < tc.steps;  // which checkpoints
  const bool by_step = c.interval > 0 && (from_step / c.interval + 1) * c.interval < tc.steps;
  if (stops_first || by_step || c.minutes > 0 || from_step >= tc.steps) return "";
  return absl::StrCat("no checkpoint before step ", tc.steps, ", the end of the run: train.checkpoint.interval ",
                      c.interval, c.interval > 0 ? " falls past it" : " is off", " and train.checkpoint.minutes is 0, ",
                      "so a kill before then loses every step from ", from_step,
                      " (set --checkpoint-minutes M or --checkpoint-interval N)");
}

absl::StatusOr<std::unique_ptr<RunSetup>> set_up_run(const FitOptions& o) {
  if (o.out.empty()) return absl::InvalidArgumentError("fit needs --out");
  if (o.allow_new_data && o.resume == ResumeMode::kNo)
    return absl::InvalidArgumentError("--allow-new-data continues a run on new shards and needs --resume");
  LM_ASSIGN_OR_RETURN(const DistEnv env, dist_env_from_environment());
  auto s = std::make_unique<RunSetup>();
  // The run folder first: a wrong --resume/--force is the cheapest mistake to name.
  const RunFolder run(o.out);
  // One writer per run folder, before anything is written (core/run_lock.h). Rank 0 writes.
  if (env.rank == 0) LM_RETURN_IF_ERROR(lock_run(run, *s));
  LM_ASSIGN_OR_RETURN(s->resuming, decide_resume(o, run));
  if (o.data.empty() && !s->resuming)
    return absl::InvalidArgumentError("fit needs --data (the shards folder of 'lmtrain prepare')");
  std::optional<ResumeBase> base;
  if (s->resuming) {
    LM_ASSIGN_OR_RETURN(base, read_resume_base(run));
  }
  LM_ASSIGN_OR_RETURN(RunFile rf, requested_config(o, base ? &*base : nullptr));
  std::string hardware;
  LM_ASSIGN_OR_RETURN(s->comm, set_up_device(o, env, rf.train, hardware));
  // Before any rank reads the folder for its data or resume point: one folder for all of them.
  if (s->comm) LM_RETURN_IF_ERROR(check_shared_run_folder(*s->comm, run.dir()));

  const std::string data_dir = o.data.empty() && base ? base->data.value("shards", "") : o.data;
  std::optional<PhaseTimer> open_timer(std::in_place, s->req.startup, "data open");  // shards, tokenizer, checks
  LM_ASSIGN_OR_RETURN(data::ShardSet set, data::ShardSet::open(data_dir));
  LM_ASSIGN_OR_RETURN(const std::string tok_dir, tokenizer_dir(o, run, s->resuming, set));
  LM_ASSIGN_OR_RETURN(s->tok, tokenizer::Tokenizer::load(tok_dir));
  LM_RETURN_IF_ERROR(set.check_tokenizer(s->tok));  // hash, vocabulary and framing
  if (!o.init_from.empty() && !s->resuming && s->tok.vocab_size() > rf.model.vocab_size)
    return absl::FailedPreconditionError(absl::StrCat(
        tok_dir, ": the shards' tokenizer has ", s->tok.vocab_size(), " ids but --init-from ", o.init_from,
        "/config.json has vocab_size ", rf.model.vocab_size, ": an extended tokenizer needs the checkpoint grown to it "
        "first ('lmtrain extend-model --hf ", o.init_from, " --tokenizer TOK_EXT --out HF_EXT', then --init-from HF_EXT), "
        "else prepare the shards with the checkpoint's own tokenizer"));
  fill_request(o, env, rf, *s);
  s->req.hardware = hardware;
  open_timer.reset();
  s->req.data_info = {{"shards", fs::absolute(data_dir).string()},
                      {"tokenizer", fs::absolute(tok_dir).string()},
                      {"shards_id", shards_id(set)}};
  LM_RETURN_IF_ERROR(model::validate(s->req.model));
  if (base) {
    LM_RETURN_IF_ERROR(plan_the_resume(o, run, *base, *s));
    if (s->finished) return s;
    LM_RETURN_IF_ERROR(check_resume_data(o, *base, s->req));
  }
  LM_RETURN_IF_ERROR(resolve(s->req.train, s->req.model, s->req.world_size));
  if (const std::string w = no_checkpoint_warning(s->req.train, s->done_step); !w.empty() && env.rank == 0)
    log_warn("%s", w);
  if (env.rank == 0) LM_RETURN_IF_ERROR(preflight(s->req.model, s->req.train));  // memory, warmup
  {
    PhaseTimer timer(s->req.startup, "data open");  // the sampler and validation windows
    LM_RETURN_IF_ERROR(load_data(set, *s));
  }
  if (!s->resuming && env.rank == 0) {
    std::error_code ec;
    fs::create_directories(o.out, ec);
    LM_RETURN_IF_ERROR(copy_tokenizer(tok_dir, run));
  }
  return s;
}

}  // namespace lm::train
