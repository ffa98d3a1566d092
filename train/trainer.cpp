#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/log.h"
#include "core/mapped_guard.h"
#include "core/run_folder.h"
#include "runtime/runtime.h"
#include "runtime/threads.h"
#include "model/transformer.h"
#include "model/verify.h"
#include "train/checkpoint.h"
#include "train/sharded_checkpoint.h"
#include "train/device.h"
#include "train/distributed.h"
#include "train/grad_sync.h"
#include "train/rank_agreement.h"
#include "model/hf_export.h"
#include "train/optim.h"
#include "train/param_groups.h"
#include "train/plan.h"

namespace lm::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kCodeVersion = "lmforge 0.1.0";

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A validation window as a device tensor (validation may wait for the device: it reads losses).
torch::Tensor to_window_tensor(const std::vector<int32_t>& flat, int64_t rows, int64_t cols,
                               const torch::Device& device) {
  TORCH_CHECK(static_cast<int64_t>(flat.size()) == rows * cols, "batch has ", flat.size(),
              " tokens, expected ", rows, "x", cols);
  auto t = torch::from_blob(const_cast<int32_t*>(flat.data()), {rows, cols}, torch::kInt32)
               .to(torch::kInt64);
  return device.is_cpu() ? t : t.to(device, /*non_blocking=*/false);
}

// Compares the parts of a checkpoint's config that must not change on resume.
absl::Status check_resume_compatible(const Json& saved, const FitRequest& req, const std::string& ckpt) {
  const Json now = run_config_json(req);
  if (saved["config"]["model"] != now["model"]) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt, ": checkpoint was trained with another model config (", saved["config"]["model"].dump(),
        ") than requested (", now["model"].dump(), "); resume with the same preset or start a new run"));
  }
  // A checkpoint written before the config sections holds these under their last name
  // ("micro_batch"): its run's config.json, once rewritten as the refusal says, still resumes.
  const Json& saved_train = saved["config"]["train"];
  auto was_at = [&](const Json::json_pointer& at) {
    return saved_train.contains(at) ? saved_train[at] : saved_train.value(at.back(), Json());
  };
  for (const char* key : {"/batch/seq_len", "/seed"}) {
    const Json::json_pointer at(key);
    if (was_at(at) != now["train"][at]) {
      return absl::FailedPreconditionError(absl::StrCat(
          ckpt, ": train", absl::StrReplaceAll(key, {{"/", "."}}), " was ", was_at(at).dump(), " but is now ",
          now["train"][at].dump(), "; a resume with another batch layout would not see the same data"));
    }
  }
  // The rows of an optimizer step (micro_batch x grad_accum x ranks) must stay; how they are dealt
  // to ranks and micro-batches may change: the data cursor counts global rows, so a resume on
  // fewer or more ranks trains on the same rows, summed in another order (fp32 rounding).
  const Json was_micro = was_at(Json::json_pointer("/batch/micro_batch")),
             was_accum = was_at(Json::json_pointer("/batch/grad_accum"));
  const int64_t was_world = saved.value("world_size", int64_t{1});
  const int64_t rows_was = was_micro.is_number_integer() && was_accum.is_number_integer()
                               ? was_micro.get<int64_t>() * was_accum.get<int64_t>() * was_world
                               : -1;
  const int64_t rows_now = req.train.batch.micro_batch * req.train.batch.grad_accum * req.world_size;
  if (rows_was != rows_now) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt, ": the run took ", rows_was, " rows per step (micro_batch ", was_micro.dump(), " x grad_accum ",
        was_accum.dump(), " x ", was_world, " ranks) but this one takes ", rows_now, " (", req.train.batch.micro_batch,
        " x ", req.train.batch.grad_accum, " x ", req.world_size, "); a resume must keep the rows per step: ",
        "on another number of ranks give --grad-accum (or --micro-batch) so that the product stays ", rows_was));
  }
  if (was_world != req.world_size || was_micro != now["train"]["batch"]["micro_batch"] ||
      was_accum != now["train"]["batch"]["grad_accum"])
    log_warn("%s: written by %d ranks x micro_batch %s x grad_accum %s, resumed as %d x %d x %d: the same %d rows per "
             "step, dealt anew; their sum runs in another order, so the weights differ from an unbroken run by fp32 "
             "rounding",
             ckpt, static_cast<int>(was_world), was_micro.dump(), was_accum.dump(), req.world_size,
             req.train.batch.micro_batch, req.train.batch.grad_accum, rows_now);
  if (saved["tokenizer_hash"] != req.tokenizer_hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt, ": checkpoint used tokenizer ", saved["tokenizer_hash"].dump(), " but the data now has ",
        req.tokenizer_hash, "; use the shards the run was started with"));
  }
  return absl::OkStatus();
}

// Keeps metrics.jsonl lines up to `step` so a resumed run's log equals an uninterrupted one (a
// parsed line dumps back to the same text: both are nlohmann's shortest round-trip form).
absl::Status truncate_metrics(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return absl::OkStatus();
  LM_ASSIGN_OR_RETURN(std::vector<Json> rows, read_metrics(path));
  std::string kept;
  for (const Json& row : rows)
    if (row.value("step", int64_t{0}) <= step) kept += row.dump() + "\n";
  return write_file_atomic(path, kept);
}

// Both step-keyed logs of the run: metrics.jsonl and samples.jsonl.
absl::Status truncate_logs(const std::string& run_dir, int64_t step) {
  LM_RETURN_IF_ERROR(truncate_metrics(RunFolder(run_dir).metrics(), step));
  return truncate_metrics(RunFolder(run_dir).samples(), step);
}

// A failed write to metrics.jsonl (an ofstream; errno says why). It is appended to, not replaced:
// a full disk leaves its last lines torn, which --resume cuts back to the checkpoint's step.
absl::Status stream_error(const std::string& path) {
  return errno_status("write", path, "then --resume from the last checkpoint");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

Json run_config_json(const FitRequest& req) {
  Json j;
  j["model"] = to_json(req.model);
  j["train"] = to_json(req.train);
  j["data"] = req.data_info;
  j["tokenizer_hash"] = req.tokenizer_hash;
  j["world_size"] = req.world_size;
  j["code_version"] = kCodeVersion;
  return j;
}

std::string FitSummary::summary() const {
  // A resume at the last step trains nothing: say so instead of "trained N steps ... 0 tok/s".
  if (steps == start_step && losses.empty())
    return absl::StrFormat("nothing to train: the run is at step %d of its %d steps (extend it with --steps or --tokens)%s",
                           steps, steps, checkpoint.empty() ? "" : "\n  checkpoint: " + checkpoint);
  // After a resume the time is this invocation's: say which steps it trained, not the run's total.
  const std::string tok = format_count(static_cast<double>(tokens));
  const std::string what =
      start_step == 0 ? absl::StrFormat("%d steps (%s tokens)", steps, tok)
                      : absl::StrFormat("steps %d-%d (%d this start; %d steps, %s tokens in the run)", start_step + 1,
                                        steps, steps - start_step, steps, tok);
  std::string s = absl::StrFormat("trained %s in %s: %.0f tok/s, %s, final train loss %.4f nats/token", what,
                                  format_duration(seconds), tokens_per_s, mfu_text(), final_loss);
  for (const auto& [lang, v] : val_loss) s += absl::StrFormat("\n  val loss %s: %.4f nats/token", lang, v);
  if (comm_wait_s > 0)
    s += absl::StrFormat("\n  gradient all-reduce wait: %.2f s of %.2f s step time (%.1f%%)", comm_wait_s, step_s,
                         step_s > 0 ? 100 * comm_wait_s / step_s : 0.0);
  if (peak_device_bytes > 0)
    s += absl::StrFormat("\n  peak GPU memory: %.2f GB allocated%s", peak_device_bytes / 1e9,
                         plan_device_bytes > 0 ? absl::StrFormat("; lmtrain plan counts %.2f GB for this run (peak %.2fx)",
                                                                 plan_device_bytes / 1e9, peak_device_bytes / plan_device_bytes)
                                               : std::string());
  if (nan_skipped > 0)
    s += absl::StrFormat("\n  skipped %d updates with a non-finite loss or gradient (train.nan_skip_limit)", nan_skipped);
  if (!floor_warning.empty()) s += "\n  WARNING: " + floor_warning;
  if (!peak_warning.empty()) s += "\n  note: " + peak_warning;
  if (!fast_path_fallback.empty())
    s += "\n  WARNING: trained with the reference instead of these fast paths, which failed their start-up check "
         "on this device: " + absl::StrJoin(fast_path_fallback, ", ");
  if (!checkpoint.empty()) s += "\n  checkpoint: " + checkpoint;
  return s;
}

// "MFU 45.1% (median of 12 intervals; mfu_measured_peak 56.4%)": both MFUs, by their names.
std::string FitSummary::mfu_text() const {
  if (!(mfu > 0)) return "MFU n/a (device peak unknown)";
  std::string s = absl::StrFormat("MFU %.1f%% (median of %d interval%s", 100 * mfu, mfu_intervals,
                                  mfu_intervals == 1 ? "" : "s");
  if (mfu_measured_peak > 0 && std::abs(mfu_measured_peak - mfu) > 1e-9)
    s += absl::StrFormat("; mfu_measured_peak %.1f%%", 100 * mfu_measured_peak);
  return s + ")";
}

absl::StatusOr<FitSummary> fit(const FitRequest& req, BatchSource& source, const ValSets& val) {
  LM_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::create(req, source, val));
  return trainer->train();
}

// ---- Set-up ------------------------------------------------------------------------------------

Trainer::Trainer(const FitRequest& req, BatchSource& source, const ValSets& val)
    : req_(req),
      tc_(req_.train),
      source_(source),
      val_(val),
      main_rank_(req.rank == 0),
      metrics_path_(RunFolder(req.run_dir).metrics()),
      device_(req.train.hardware.device == "cuda" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(req.local_rank))
                                         : torch::Device(torch::kCPU)),
      bf16_(req.train.hardware.dtype == "bf16"),
      faults_(req.train) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const FitRequest& req_in, BatchSource& source,
                                                         const ValSets& val) {
  FitRequest req = req_in;
  // "auto" device/dtype (fit did it already, and said how in req.hardware)
  const std::string hardware = resolve_hardware(req.train, torch::cuda::is_available());
  if (req.hardware.empty()) req.hardware = hardware;
  LM_RETURN_IF_ERROR(model::validate(req.model));
  LM_RETURN_IF_ERROR(resolve(req.train, req.model, req.world_size));
  LM_RETURN_IF_ERROR(RunFolder(req.run_dir).open(req.resume, req.force));
  install_mapped_file_guard();  // a shard cut short under the run: a clean stop, not SIGBUS
  std::unique_ptr<Trainer> t(new Trainer(req, source, val));
  LM_RETURN_IF_ERROR(t->build_model());
  LM_RETURN_IF_ERROR(t->restore_or_start());
  // Every rank on the same step from the same checkpoint, or none trains (train/rank_agreement.h).
  if (req.comm != nullptr) LM_RETURN_IF_ERROR(check_same_resume(*req.comm, t->step_, t->restored_id_));
  LM_RETURN_IF_ERROR(t->startup_checks());
  t->start_grad_sync();
  t->announce();
  LM_RETURN_IF_ERROR(t->open_metrics());
  return t;
}

absl::Status Trainer::build_model() {
  if (device_.is_cuda() && !torch::cuda::is_available())
    return absl::FailedPreconditionError("train.hardware.device is cuda but no CUDA device is visible");
  if (device_.is_cuda()) set_tf32(tc_.hardware.tf32);
  if (!model::is_sdpa_backend(tc_.hardware.sdpa_backend))
    return absl::InvalidArgumentError(absl::StrCat("train.hardware.sdpa_backend: unknown backend '", tc_.hardware.sdpa_backend,
                                                   "' (use auto, flash, cudnn, efficient or math)"));
  // On CUDA only: the CPU's SDPA kernel choice is left alone (its flash kernel is the fast one).
  if (device_.is_cuda()) model::set_sdpa_backend(tc_.hardware.sdpa_backend);
  torch::manual_seed(tc_.seed);
  // Initialised once, from train.seed; a start from an HF folder loads every parameter below
  // (load_hf_weights refuses a missing one), so its weights are not drawn first only to be
  // overwritten (seconds and a temporary of the largest matrix for a 1B model).
  const bool from_hf = !req_.init_from.empty() && !req_.resume;
  model_ = model::Transformer(req_.model, tc_.seed, /*draw_weights=*/!from_hf);
  model_->set_recompute(tc_.hardware.recompute);
  if (tc_.hardware.cuda_kernels) {
    if (!model_->set_cuda_kernels(true))
      return absl::FailedPreconditionError(
          "train.hardware.cuda_kernels: this build has no CUDA kernels (LibTorch without CUDA, or no nvcc when it "
          "was built); set it false");
    if (!device_.is_cuda()) log_warn("train.hardware.cuda_kernels: on, but they act on CUDA tensors only (device cpu)");
  }
  LM_RETURN_IF_ERROR(keep_fast_paths_off());
  choose_cuda_graphs();
  if (from_hf) LM_RETURN_IF_ERROR(model::init_from_hf(req_.init_from, model_));
  model_->to(device_);
  choose_threads();
  model_->train();
  for (const auto& p : model_->named_parameters()) params_.emplace_back(p.key(), p.value());
  for (auto& [n, p] : params_) plist_.push_back(p);
  if (req_.comm != nullptr && tc_.distributed.zero == 1) {
    // ZeRO-1: this rank's AdamW holds its shard of every bucket (train/optimizer_shards.h); with
    // sharded master weights, of the matmul weights' fp32 masters too.
    LM_ASSIGN_OR_RETURN(std::vector<bool> bf16_working, sharded_master_params());
    zero_ = std::make_unique<OptimizerShards>(plist_, req_.comm->rank(), req_.comm->world(), bucket_bytes(),
                                              std::move(bf16_working));
    optim_ = std::make_unique<AdamW>(params_, tc_, &zero_->parts());
  } else {
    optim_ = std::make_unique<AdamW>(params_, tc_);
  }
  if (req_.comm != nullptr) {
    // Every rank must run the same job; then start from rank 0's weights.
    LM_RETURN_IF_ERROR(req_.comm->check_same("run config", run_config_json(req_).dump()));
    std::vector<torch::Tensor> state = plist_;
    req_.comm->broadcast(state);
  }
  return absl::OkStatus();
}

// distributed.master_weights sharded: which parameters train as bf16 working weights (every 2-D
// weight but the token embedding, which a lookup reads; a tied head stays with it), or none.
absl::StatusOr<std::vector<bool>> Trainer::sharded_master_params() const {
  if (tc_.distributed.master_weights != "sharded") return std::vector<bool>{};
  if (!bf16_)
    return absl::FailedPreconditionError(
        "train.distributed.master_weights: sharded trains bf16 working weights, but this run trains in fp32 "
        "(hardware.dtype resolved to fp32); set --dtype bf16 or --master-weights whole");
  std::vector<bool> out;
  for (const auto& [name, p] : params_) out.push_back(p.dim() == 2 && name.find("embed_tokens") == std::string::npos);
  return out;
}

absl::Status Trainer::restore_or_start() {
  // The ranks' optimizer files of a step a killed run never committed (no rank writes yet: the
  // others wait in check_same_resume).
  if (main_rank_) remove_parts_leftovers(req_.run_dir);
  if (!req_.resume) return write_run_config();
  ResumePoint point;
  if (req_.resume_point) {
    point = *req_.resume_point;
  } else {
    LM_ASSIGN_OR_RETURN(point, choose_resume_point(req_.run_dir));
  }
  if (point.checkpoint.empty()) {
    // Killed before its first checkpoint: the run starts over from step 0 with its own config
    // (the model above is initialised from the same seed as a fresh start).
    if (main_rank_) LM_RETURN_IF_ERROR(truncate_logs(req_.run_dir, 0));
    log_info("%s: no checkpoint yet; starting the run from step 0 with its config.json", req_.run_dir);
    return write_run_config();
  }
  const std::string& ckpt = point.checkpoint;
  LM_ASSIGN_OR_RETURN(Json state, read_trainer_state(ckpt));
  LM_RETURN_IF_ERROR(check_resume_compatible(state, req_, ckpt));
  LM_RETURN_IF_ERROR(load_model(ckpt, model_));
  LM_RETURN_IF_ERROR(load_optimizer(ckpt, *optim_));
  restored_id_ = checkpoint_identity(ckpt);
  if (req_.new_data) {
    // Continued pretraining: weights, AdamW moments and the step are kept, the data order
    // starts at the beginning of the new shards (the old cursor means nothing there).
    log_info("continuing on new data: the sampler starts fresh; weights, optimizer state and step kept");
  } else {
    LM_RETURN_IF_ERROR(annotate(source_.restore(state["data_cursor"]), ckpt + "/trainer.json data_cursor"));
  }
  if (state.contains("rng_cpu")) LM_RETURN_IF_ERROR(set_cpu_rng_state(state["rng_cpu"].get<std::string>()));
  step_ = state["step"].get<int64_t>();
  tokens_ = state["tokens"].get<int64_t>();
  nan_skipped_ = state.value("nan_skipped", int64_t{0});
  // Loaded: now set aside the newer checkpoints that failed and point `latest` here, then cut the logs back.
  if (main_rank_) LM_RETURN_IF_ERROR(settle_resume_point(req_.run_dir, point));
  if (main_rank_) LM_RETURN_IF_ERROR(truncate_logs(req_.run_dir, step_));
  log_info("resumed from %s (step %d, %s tokens)", ckpt, step_, format_count(static_cast<double>(tokens_)));
  return write_run_config();
}

// config.json is the run's truth: written at the start, and on a resume that changed it (a
// re-planned budget, new data) so the report and the next resume see the run as it now is. An
// unchanged config is not rewritten: a resume that fails later leaves the folder as it was.
absl::Status Trainer::write_run_config() const {
  if (!main_rank_) return absl::OkStatus();
  const std::string path = RunFolder(req_.run_dir).config();
  const Json now = run_config_json(req_);
  if (req_.resume && fs::exists(path)) {
    auto old = read_json_file(path);
    if (old.ok() && *old == now) return absl::OkStatus();
  }
  return write_json_file(path, now);
}

// train.hardware.cuda_graphs where a graph can hold the step: one CUDA device, no data parallel
// (the all-reduce is not captured) and no fault injection (it poisons chosen steps only).
// Elsewhere the steps run eagerly and the log says why.
void Trainer::choose_cuda_graphs() {
  if (!tc_.hardware.cuda_graphs) return;
  const char* why = nullptr;
  if (!device_.is_cuda()) why = "they need a CUDA device (device cpu)";
  else if (req_.comm != nullptr) why = "not with data parallel yet (the gradient all-reduce is not captured)";
  else if (faults_.any()) why = "not with fault injection (train.debug), which poisons chosen steps only";
  if (why != nullptr) {
    log_warn("train.hardware.cuda_graphs: on, but %s: steps run eagerly", why);
    return;
  }
  graphs_ = true;
}

// train.hardware.threads (the global --threads) forces the count; 0 times a forward of one sequence
// (up to 128 tokens) at 1 thread and at all cores and keeps the faster (runtime/threads.h). On CUDA
// the CPU threads only feed the device: all cores, no probe.
// A resume on CPU keeps the thread count of the checkpoint it continues from (trainer.json
// "threads"): another count sums in another order, and the weights after the resume differ in
// their last bits from a run that never stopped (issue 40). --threads N still wins, said loudly.
void Trainer::choose_threads() {
  PhaseTimer timer(req_.startup, "thread probe");
  const int64_t t = std::min<int64_t>(tc_.batch.seq_len, 128);
  auto forward = model::forward_probe(model_, 1, t);
  const int run = req_.resume && req_.resume_point && !device_.is_cuda() ? req_.resume_point->threads : 0;
  const int want = tc_.hardware.threads == 0 && run > 0 ? run : tc_.hardware.threads;
  const ThreadChoice c = set_threads_for(want, !device_.is_cuda(), [&] {
    AutocastGuard ac(device_, bf16_);
    return forward();
  }, absl::StrFormat("forward 1 x %d tokens", t));
  threads_ = c.threads;
  threads_line_ = c.line;  // said with the device in announce()
  if (want == run && run > 0) threads_line_ += " (the run's count, kept on resume: bit-identical)";
  if (run > 0 && c.threads != run && main_rank_)
    log_warn("threads: this start trains on %d, the checkpoint it resumes was trained on %d: from here on the weights "
             "differ in their last bits from a run that never stopped (sums in another order). Leave --threads out, "
             "or pass --threads %d, to continue bit-identically",
             c.threads, run, run);
}

// train.hardware.fast_paths_off: each named fast path on its reference from the start (an
// unknown name is refused with the list of known ones).
absl::Status Trainer::keep_fast_paths_off() {
  const auto& paths = model::fast_paths();
  for (const auto& name : tc_.hardware.fast_paths_off) {
    auto it = std::find_if(paths.begin(), paths.end(), [&](const model::FastPath& fp) { return fp.name == name; });
    if (it == paths.end()) {
      std::vector<std::string> known;
      for (const auto& fp : paths) known.push_back(fp.name);
      return absl::InvalidArgumentError(absl::StrCat("train.hardware.fast_paths_off: unknown fast path '", name,
                                                     "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
    it->fall_back(model_);
  }
  if (!tc_.hardware.fast_paths_off.empty())
    log_info("fast paths on their reference (train.hardware.fast_paths_off): %s",
             absl::StrJoin(tc_.hardware.fast_paths_off, ", "));
  return absl::OkStatus();
}

// Start-up verification on the real config and device: every fast path against its reference
// (each start, resumes too: the machine may be another), then refuse to train a model that
// cannot learn.
absl::Status Trainer::startup_checks() {
  checks_.enabled = tc_.debug.verify_at_start;
  if (!checks_.enabled) return absl::OkStatus();
  if (auto s = verify_fast_paths(); !s.ok()) return s;
  if (step_ != 0) return absl::OkStatus();
  PhaseTimer timer(req_.startup, "gradient flow");
  auto grad = model::check_gradient_flow(model_, 1, std::min<int64_t>(tc_.batch.seq_len, 64), tc_.seed + 1);
  if (!grad.ok()) return absl::InternalError("start-up verification failed, not training:\n" + grad.summary());
  if (main_rank_) log_detail("%s", grad.summary());
  checks_.gradient_flow = true;
  checks_.parameters = grad.checked;
  return absl::OkStatus();
}

// A fast path that disagrees with its reference on this device is switched to the reference
// and said loudly: a warning now, the summary, and "fast_path_fallback" in every metrics line.
// Each check's line is a detail (-v) while it passes; a failing one, and the fallback, are warnings.
absl::Status Trainer::verify_fast_paths() {
  PhaseTimer timer(req_.startup, "fast paths");
  // On a GPU each path once more at the run's own micro-batch, SDPA's other backends on a failure.
  const auto run = device_.is_cuda() ? model::RunShape{tc_.batch.micro_batch, tc_.batch.seq_len} : model::RunShape{};
  const auto report = model::verify_fast_paths(model_, device_, bf16_ ? torch::kBFloat16 : torch::kFloat32, tc_.seed + 2, run);
  for (const auto& n : report.notes) if (main_rank_) log_warn("%s", n);
  if (main_rank_) {
    for (const auto& c : report.checks) {
      if (c.ok()) log_detail("%s", c.summary());
      else log_warn("%s", c.summary());
    }
    if (!report.ok())
      log_warn("fast paths FAILED on this device, training with their reference instead (slower, correct): %s",
               absl::StrJoin(report.fell_back, ", "));
  }
  checks_.fast_paths = static_cast<int>(report.checks.size());
  checks_.fell_back = report.fell_back;
  sum_.fast_path_fallback = report.fell_back;
  for (const auto& c : report.checks)
    if (std::find(report.fell_back.begin(), report.fell_back.end(), c.name) == report.fell_back.end())
      sum_.fast_paths_verified.push_back(c.name);
  if (!report.error.empty()) return absl::FailedPreconditionError("start-up verification: " + report.error);
  return absl::OkStatus();
}

// Gradient averaging: hooks are registered after the start-up check so its backward stays local.
void Trainer::start_grad_sync() {
  Comm* comm = req_.comm;
  if (comm == nullptr) return;
  make_grad_sync(comm);
  if (tc_.distributed.reduce_dtype == "bf16") {
    grad_sync_->set_reduce_dtype(torch::kBFloat16);
    if (main_rank_) log_info("data parallel: gradients reduced in bf16 (half the bytes on the wire; distributed.reduce_dtype)");
  }
}

void Trainer::make_grad_sync(Comm* comm) {
  if (zero_) {
    // The distributed optimizer's weights turn bf16 here: after the restore, the broadcast and the
    // start-up checks (which run on the fp32 weights), before the hooks take their AccumulateGrad nodes.
    const bool sharded_master = tc_.distributed.master_weights == "sharded";
    if (sharded_master) zero_->use_bf16_working_weights();
    // The gradients live in the buckets only: each micro-batch's is summed there by its hook and
    // its .grad dropped, so no whole .grad is kept beside the buckets (4 bytes a parameter).
    grad_sync_ = std::make_unique<GradSync>(
        plist_, comm->world(), zero_->plan(), zero_->flats(), zero_->shards(),
        [comm](torch::Tensor out, torch::Tensor in) { return comm->start_reduce_scatter(std::move(out), std::move(in)); });
    if (main_rank_)
      log_info("data parallel: %d ranks, %s, ZeRO-1: gradients summed in %d buckets of <= %.0f MiB (no .grad kept), "
               "reduce-scatter overlapped with backward, AdamW on this rank's shard (%.1f MiB of moments%s), weights all-gathered%s",
               comm->world(), comm->backend(), grad_sync_->stats().buckets, tc_.distributed.bucket_mb,
               optim_->moment_bytes() / double(1 << 20),
               sharded_master ? absl::StrFormat(", %.1f MiB of fp32 master weights", zero_->master_bytes() / double(1 << 20)) : "",
               sharded_master ? " in bf16 (the matmul weights train as bf16 working copies)" : "");
    return;
  }
  grad_sync_ = std::make_unique<GradSync>(
      plist_, comm->world(), [comm](torch::Tensor t) { return comm->start_sum(std::move(t)); }, tc_.distributed.overlap,
      bucket_bytes());
  if (main_rank_)
    log_info("data parallel: %d ranks, %s, gradient all-reduce %s backward%s", comm->world(), comm->backend(),
             tc_.distributed.overlap ? "overlapped with" : "after",
             tc_.distributed.overlap ? absl::StrFormat(" (%d buckets of <= %.0f MiB)", grad_sync_->stats().buckets, tc_.distributed.bucket_mb)
                             : std::string());
}

// The device peak (for MFU) and the banner: device and threads, model, batch, budget, the MFU
// ceiling and the start-up checks in a line each; versions and each phase's time under -v.
void Trainer::announce() {
  {
    PhaseTimer timer(req_.startup, "peak measurement");
    peak_ = device_peak(device_, bf16_ ? torch::kBFloat16 : torch::kFloat32, tc_.logging.peak_flops);
  }
  flops_per_token_ = model::train_flops_per_token(req_.model, tc_.batch.seq_len);
  step_tokens_ = tokens_per_step(tc_, req_.world_size);
  sum_.start_step = step_;
  sum_.peak_source = peak_.source;
  sum_.measured_peak = peak_.measured_how;
  sum_.peak_flops = peak_.flops;
  sum_.measured_peak_flops = peak_.measured;
  sum_.peak_warning = peak_.warning;
  if (!main_rank_) return;
  if (detail_enabled())
    for (const auto& line : absl::StrSplit(version_report("lmtrain fit"), '\n')) log_detail("%s", std::string(line));
  log_info("%s; %s", req_.hardware, threads_line_);
  log_detail("device %s, %s, TF32 matmuls %s", device_.str(), bf16_ ? "bf16 autocast (fp32 master weights)" : "fp32",
             device_.is_cuda() ? (tf32_enabled() ? "on" : "off") : "n/a on cpu");
  log_info("model %s: %s params, %.3g FLOPs/token; batch %d x %d x accum %d = %s tokens/step; %d steps",
           req_.model.preset, format_count(static_cast<double>(model::param_count(req_.model))), flops_per_token_,
           tc_.batch.micro_batch, tc_.batch.seq_len, tc_.batch.grad_accum, format_count(static_cast<double>(step_tokens_)), tc_.steps);
  if (const std::string groups = describe_param_groups(tc_.param_groups); !groups.empty()) log_info("%s", groups);
  announce_peaks();
  const std::string checks = checks_line(checks_, req_.startup.wall_s());
  if (checks_.fell_back.empty()) log_info("%s", checks);
  else log_warn("%s", checks);
  log_detail("%s", req_.startup.phases_line());
}

// The two peaks, by the names of the MFUs that divide by them (train/device.h, docs/gpu.md "What
// MFU means"), and a warning when the measured ceiling cannot be believed.
void Trainer::announce_peaks() const {
  auto tflops = [](double f) { return f > 0 ? absl::StrFormat("%.3g TFLOP/s", f / 1e12) : std::string("unknown"); };
  if (tc_.logging.peak_flops > 0)
    log_info("MFU: mfu and mfu_measured_peak against train.logging.peak_flops %s (set by hand, nothing measured)",
             tflops(peak_.flops));
  else if (device_.is_cuda())
    log_info("MFU: mfu against the data-sheet peak %s (%s); mfu_measured_peak against %s (%s)", tflops(peak_.flops),
             peak_.source, tflops(peak_.measured), peak_.measured_how);
  else
    log_info("MFU: mfu and mfu_measured_peak against the measured matmul ceiling %s (%s; a CPU has no data sheet)",
             tflops(peak_.flops), peak_.source);
  if (!peak_.warning.empty()) log_warn("peak: %s", peak_.warning);
}

absl::Status Trainer::open_metrics() {
  if (!main_rank_) return absl::OkStatus();
  metrics_.open(metrics_path_, std::ios::app);
  if (!metrics_) return stream_error(metrics_path_);
  // TensorBoard files are a view of metrics.jsonl: a failure to write them warns, never stops a run.
  auto tb = TensorBoardWriter::open(RunFolder(req_.run_dir).tensorboard());
  absl::Status st = tb.status();
  if (st.ok() && step_ > 0) st = tb->mark_start(step_ + 1, unix_seconds());  // a resume: see mark_start
  if (st.ok())
    tensorboard_ = std::make_unique<TensorBoardWriter>(*std::move(tb));
  else
    log_warn("TensorBoard events not written: %s", st.ToString());
  return absl::OkStatus();
}

// ---- The loop ----------------------------------------------------------------------------------

absl::StatusOr<FitSummary> Trainer::train() {
  // Rate and ETA from this invocation's start: a resume's earlier steps took no time here.
  progress_ = std::make_unique<Progress>("train", static_cast<double>(tc_.steps), "steps", static_cast<double>(step_));
  t_start_ = t_log_ = last_checkpoint_ = Clock::now();
  tokens_at_log_ = tokens_;
  while (step_ < tc_.steps) {
    StepResult r = train_step();  // its loss, norm and skip flag stay on the device
    if (r.abandoned) {            // SIGINT/SIGTERM between its micro-batches: dropped whole
      LM_RETURN_IF_ERROR(stop_mid_step());
      break;
    }
    unread_.push_back(std::move(r));
    advance(unread_.back());  // step and token counters, timings
    LM_RETURN_IF_ERROR(check_data_intact());  // a shard that shrank under a step that could not be dropped
    if (split_.done && sum_.floor_warning.empty()) warn_floor();  // the throughput floor fired
    // The only host read of step results: losses, and each non-finite step through
    // handle_non_finite (skip, or stop past train.nan_skip_limit).
    if (read_due()) LM_RETURN_IF_ERROR(read_steps(/*logging_current=*/true));
    if (log_due()) {
      Json line = measure(last_);  // throughput, MFU, the throughput sentinel
      validate(line);              // validation loss on eval_interval steps
      LM_RETURN_IF_ERROR(write_metrics(line, last_));
    }
    LM_RETURN_IF_ERROR(checkpoint_if_due());
    if (const Stop why = stop_policy(); why != Stop::kNo) {  // train.stop_at_step, SIGINT/SIGTERM
      LM_RETURN_IF_ERROR(checkpoint(/*wait=*/true));
      announce_stop(why);
      break;
    }
  }
  if (step_ == tc_.steps && sum_.stop_signal == 0) {
    if (tc_.checkpoint.at_end) LM_RETURN_IF_ERROR(checkpoint(/*wait=*/true));
    else LM_RETURN_IF_ERROR(read_steps(/*logging_current=*/false));  // every step's loss still arrives
  }
  return finish();
}

// ---- The step ----------------------------------------------------------------------------------

StepResult Trainer::train_step() {
  StepResult r;
  r.step = step_ + 1;
  r.lr = lr_at(tc_, step_);
  const FaultInjector::Site fault = faults_.at(step_);
  const auto t_step = Clock::now();
  optim_->set_step(step_);                       // the groups' scales (a re-warmup after the first stage)
  if (device_.is_cuda()) optim_->set_lr(r.lr);  // read on the device by the update (and a replay)
  // No graph in the embeddings-only stage: its step leaves out gradients the next stage applies,
  // so the graph is captured once the whole model trains.
  if (graphs_ && steps_this_start_ >= 2 && !embeddings_only_at(tc_.param_groups, step_)) {
    graphed_step(r);
  } else {
    if (can_drop_step()) step_cursor_ = data_cursor();  // a step dropped midway comes back here
    auto out = device_step([&](int64_t micro) { return take_window(more_windows(micro)); }, fault, r);
    r.abandoned = abandoned_;
    if (r.abandoned) return r;
    r.record = std::move(out.record);
    r.present = std::move(out.present);
  }
  ++steps_this_start_;
  r.seconds = since(t_step);
  if (split_.on) {
    split_.on = false;
    split_.done = true;
    split_.step = r.step;
  }
  return r;
}

// The step split of the throughput floor: with split_.on, waits for the device and adds the time
// since the last mark to *phase (nullptr: only sets the mark). Off, it costs nothing.
void Trainer::lap(double* phase) {
  if (!split_.on) return;
  if (device_.is_cuda()) torch::cuda::synchronize();
  const auto now = Clock::now();
  if (phase != nullptr) *phase += std::chrono::duration<double>(now - split_.last).count();
  split_.last = now;
}

// Whether another window follows the one for `micro`: not after the last micro-batch of the last
// step, so a run reads no data beyond what it trains on.
bool Trainer::more_windows(int64_t micro) const {
  return micro + 1 < tc_.batch.grad_accum || step_ + 1 < tc_.steps;
}

// The device work of one optimizer step: forward and backward of grad_accum micro-batches
// (`window(micro)` gives each), gradient averaging across ranks, clipping, and the AdamW update
// unless the loss or gradient is non-finite. A CUDA graph captures exactly this (graphed_step).
Trainer::DeviceStep Trainer::device_step(const std::function<torch::Tensor(int64_t)>& window,
                                         FaultInjector::Site fault, StepResult& r) {
  lap(nullptr);  // the split's clock starts here (when the step is timed phase by phase)
  optim_->zero_grad();
  if (grad_sync_) grad_sync_->begin_step();
  torch::Tensor loss = accumulate_gradients(fault, window);  // float64 scalar on the device
  if (abandoned_) return {};                                  // a stop between micro-batches
  if (grad_sync_) r.comm_wait_s = sync_gradients(loss);
  // The first stage and frozen groups (train.param_groups): their parameters and moments keep
  // their bytes, and the clipping norm is the trained parameters' alone.
  drop_frozen_grads(params_, tc_.param_groups, r.step - 1);
  if (fault == FaultInjector::Site::kGradient) FaultInjector::poison_gradient(params_);
  GradNorm norm = clip_gradients();
  // A non-finite loss or gradient is never applied: found_inf skips the update on the device
  // (parameters, moments and the step count stay as they were), so the host need not wait to
  // know; read_steps learns it later and handle_non_finite counts the skip or stops.
  auto found_inf = loss.isfinite().logical_and(norm.total.isfinite()).logical_not().to(torch::kFloat32);
  apply_update(r, found_inf);
  lap(&split_.optimizer);
  return {torch::stack({loss, norm.total.to(torch::kFloat64), norm.first_bad.to(torch::kFloat64)}),
          std::move(norm.present)};
}

// The global gradient norm and clipping: over the whole gradients, or (ZeRO-1) over every rank's
// shards, summed by an all-reduce.
GradNorm Trainer::clip_gradients() {
  if (!zero_) return clip_grad_norm(plist_, tc_.optimizer.grad_clip);
  Comm* comm = req_.comm;
  return zero_->clip_grad_norm(tc_.optimizer.grad_clip, [comm](torch::Tensor t) { return comm->start_sum(std::move(t)); });
}

// AdamW's update (of this rank's shard with ZeRO-1, then every rank's shards all-gathered into
// the weights: a skipped update gathers the unchanged ones).
void Trainer::apply_update(const StepResult& r, const torch::Tensor& found_inf) {
  if (device_.is_cuda()) optim_->step_device_lr(found_inf);
  else optim_->step(r.lr, found_inf);
  if (!zero_) return;
  Comm* comm = req_.comm;
  zero_->gather_params([comm](torch::Tensor out, torch::Tensor in) { return comm->start_all_gather(std::move(out), std::move(in)); });
}

// The optimizer's whole state for a checkpoint (data parallel, one process; under ZeRO-1 each rank
// writes its own part instead: write_optimizer_shards).
model::NamedTensors Trainer::optimizer_state() const { return optim_->state(); }

// The distributed optimizer's fp32 master weights, whole, for a checkpoint (every rank calls it:
// an all-gather per bucket); empty otherwise (the parameters are the fp32 weights).
model::NamedTensors Trainer::master_weights() const {
  std::vector<std::string> names;
  for (const auto& [n, p] : params_) names.push_back(n);
  Comm* comm = req_.comm;
  return zero_->master_weights(names, [comm](torch::Tensor out, torch::Tensor in) {
    return comm->start_all_gather(std::move(out), std::move(in));
  });
}

// train.hardware.cuda_graphs: this start's third step runs device_step for real on a side stream
// and captures it on static window buffers; every later step copies its windows into them and
// replays. What the loop reads (record) is copied out of the graph's output each step.
void Trainer::graphed_step(StepResult& r) {
  const int64_t K = tc_.batch.grad_accum;
  if (static_windows_.empty())
    for (int64_t m = 0; m < K; ++m)
      static_windows_.push_back(torch::empty({tc_.batch.micro_batch, tc_.batch.seq_len + 1},
                                             torch::TensorOptions().dtype(torch::kInt64).device(device_)));
  for (int64_t m = 0; m < K; ++m) static_windows_[m].copy_(take_window(more_windows(m)), /*non_blocking=*/true);
  auto from_static = [this](int64_t micro) { return static_windows_[micro]; };
  if (!graph_) {
    graph_ = std::make_unique<StepGraph>(device_);
    DeviceStep real;
    sum_.cuda_graph_captured = true;
    graph_->run_then_capture(
        [&](bool capturing) {
          if (capturing) graph_out_ = device_step(from_static, FaultInjector::Site::kNone, r);
          else real = device_step(from_static, FaultInjector::Site::kNone, r);
        },
        [&] { optim_->zero_grad(); });
    if (main_rank_)
      log_info("CUDA graphs: step %d captured (%d micro-batch%s); later steps replay it", r.step, K, K == 1 ? "" : "es");
    r.record = std::move(real.record);
    r.present = std::move(real.present);
    return;
  }
  graph_->replay();
  r.record = graph_out_.record.clone();
  r.present = graph_out_.present;
}

// The next micro-batch of token windows [micro_batch, seq_len+1] on the device, taken from the
// one fetched ahead. On CUDA the windows are staged in pinned memory and copied non_blocking
// while the GPU still works on the previous micro-batch; the caching host allocator keeps a
// staging buffer until its copy is done, so the host never waits.
// `more`: another window will be trained on (not after the last micro-batch of the last step, so
// a run reads no data beyond what it trains on).
torch::Tensor Trainer::take_window(bool more) {
  if (!ahead_.defined()) ahead_ = fetch_window();
  torch::Tensor w = std::move(ahead_);
  ahead_ = more ? fetch_window() : torch::Tensor();
  return w;
}

torch::Tensor Trainer::fetch_window() {
  ahead_cursor_ = source_.cursor();  // a checkpoint resumes at the first window not trained on
  source_.next(&flat_);
  const int64_t rows = tc_.batch.micro_batch, cols = tc_.batch.seq_len + 1;
  TORCH_CHECK(static_cast<int64_t>(flat_.size()) == rows * cols, "batch has ", flat_.size(), " tokens, expected ",
              rows, "x", cols);
  auto t = torch::from_blob(flat_.data(), {rows, cols}, torch::kInt32);
  if (device_.is_cpu()) return t.to(torch::kInt64);
  auto pinned = torch::empty({rows, cols}, torch::TensorOptions().dtype(torch::kInt64).pinned_memory(true));
  pinned.copy_(t);
  return pinned.to(device_, /*non_blocking=*/true);
}

// Where the data stream stands for a checkpoint: before the window fetched ahead.
Json Trainer::data_cursor() const { return ahead_.defined() ? ahead_cursor_ : source_.cursor(); }

// Forward and backward of grad_accum micro-batches; returns their mean loss as a float64 scalar
// on the device (summed there, never read here: the host would wait for the GPU).
torch::Tensor Trainer::accumulate_gradients(FaultInjector::Site fault,
                                            const std::function<torch::Tensor(int64_t)>& window) {
  AutocastGuard ac(device_, bf16_);
  torch::Tensor step_loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (int64_t micro = 0; micro < tc_.batch.grad_accum; ++micro) {
    micro_done_ = micro;
    if (can_drop_step() && drop_step_now()) {  // a stop is heard within one micro-batch
      abandoned_ = true;
      break;
    }
    if (tc_.debug.slow_forward_ms > 0)  // tests: a run slowed on purpose (the throughput floor)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(tc_.debug.slow_forward_ms));
    torch::Tensor w = window(micro);
    // A shard shrank under the run: zeros, not data. One process drops the step here; ranks learn it
    // at the next micro-batch's agreement (drop_step_now) or at the step's end (check_data_intact).
    if (can_drop_step() && req_.comm == nullptr && !mapped_file_fault().empty()) {
      abandoned_ = true;
      break;
    }
    auto loss = model_->loss(w) / static_cast<double>(tc_.batch.grad_accum);
    if (fault == FaultInjector::Site::kLoss) loss = FaultInjector::poison_loss(loss);
    lap(&split_.forward);
    // Only the last micro-batch's backward all-reduces (the others accumulate locally).
    if (grad_sync_) grad_sync_->before_backward(micro == tc_.batch.grad_accum - 1);
    loss.backward();
    lap(&split_.backward);
    step_loss.add_(loss.detach().to(torch::kFloat64));  // the sum of the fp32 losses in double, as before
  }
  return step_loss;
}

// Waits for the gradient all-reduce and averages `loss` over ranks (on the device); returns
// the seconds the host blocked. On CPU (gloo) that is the exposed all-reduce time; on CUDA
// NCCL's wait() only orders streams and the host does not synchronize, so it is ~0 there and
// the line leaves the share out (the exposed time comes from a profile, docs/performance.md).
double Trainer::sync_gradients(torch::Tensor& loss) {
  const auto t_wait = Clock::now();
  grad_sync_->finish();
  auto buf = loss.reshape({1}).clone();
  req_.comm->start_sum(buf)();
  loss = buf.squeeze(0) / static_cast<double>(req_.comm->world());
  const double wait = since(t_wait);
  sum_.buckets_in_backward += grad_sync_->stats().launched_in_backward;
  sum_.buckets_synced += grad_sync_->stats().buckets;
  return wait;
}

// ---- The parts after the step ------------------------------------------------------------------

// Reads the results of the steps since the last read from the device in one copy (the loop's
// only host sync: on log, checkpoint, stop and last steps). Then, in step order, every step that
// was not applied goes through handle_non_finite and gets its metrics line (the current step's
// comes from the log line when `logging_current`), and the loss history follows.
absl::Status Trainer::read_steps(bool logging_current) {
  if (unread_.empty()) return absl::OkStatus();
  std::vector<torch::Tensor> records;
  for (const auto& r : unread_) records.push_back(r.record);
  const torch::Tensor host = torch::stack(records).cpu();  // [n, 3] float64: loss, grad norm, first bad
  ++sum_.host_reads;
  const auto a = host.accessor<double, 2>();
  for (size_t i = 0; i < unread_.size(); ++i) {
    StepResult& r = unread_[i];
    r.loss = a[i][0];
    r.grad_norm = a[i][1];
    r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
    r.read = true;
    if (!r.applied) {
      const auto bad = static_cast<int64_t>(a[i][2]);
      LM_RETURN_IF_ERROR(handle_non_finite(r, bad >= 0 ? params_[r.present[bad]].first : "none (the loss itself)"));
      if (r.step != step_ || !logging_current) LM_RETURN_IF_ERROR(append_line(step_line(r)));
    }
    if (r.applied) last_loss_ = r.loss;
    sum_.losses.push_back(r.loss);
  }
  last_ = std::move(unread_.back());
  unread_.clear();
  return absl::OkStatus();
}

bool Trainer::read_due() const {
  return step_ % tc_.logging.interval == 0 || step_ == tc_.steps || step_ == tc_.stop_at_step ||
         (tc_.checkpoint.interval > 0 && step_ % tc_.checkpoint.interval == 0);
}

// A step that was not applied (its update was skipped on the device): count the skip (up to
// train.nan_skip_limit in the whole run) or stop with the last good checkpoint named. The
// steps between it and the read ran but are never checkpointed: every checkpoint reads first.
absl::Status Trainer::handle_non_finite(StepResult& r, const std::string& culprit) {
  const std::string what = absl::StrFormat("step %d: non-finite %s (loss %g, grad norm %g), first bad parameter: %s",
                                           r.step, std::isfinite(r.loss) ? "gradient" : "loss", r.loss,
                                           r.grad_norm, culprit);
  if (nan_skipped_ >= tc_.nan_skip_limit) {
    // A checkpoint still being written in the background is the last good one once it lands.
    if (writer_) {
      if (auto w = writer_->wait(); !w.ok()) log_warn("the checkpoint in flight failed: %s", w.ToString());
    }
    std::string last = "none yet";
    auto latest = latest_checkpoint(req_.run_dir);
    if (latest.ok()) last = *latest;
    const std::string limit =
        tc_.nan_skip_limit > 0
            ? absl::StrFormat(" (%d earlier steps skipped, train.nan_skip_limit is %d)", nan_skipped_, tc_.nan_skip_limit)
            : std::string();
    return absl::InternalError(absl::StrFormat(
        "%s; stopped without applying the step%s; last good checkpoint: %s (lower train.optimizer.lr or check the data, "
        "then --resume)",
        what, limit, last));
  }
  ++nan_skipped_;
  r.skipped = culprit;
  log_warn("%s; update skipped (%d of train.nan_skip_limit %d)", what, nan_skipped_, tc_.nan_skip_limit);
  return absl::OkStatus();
}

void Trainer::advance(const StepResult& r) {
  interval_step_s_ += r.seconds;
  interval_comm_s_ += r.comm_wait_s;
  ++interval_steps_;
  sum_.step_s += r.seconds;
  sum_.comm_wait_s += r.comm_wait_s;
  ++step_;
  tokens_ += step_tokens_;
  if (main_rank_ && step_ == tc_.param_groups.embeddings_only_steps && step_ < tc_.steps)
    log_info("step %d: the embeddings-only stage is over; the whole model trains from step %d", step_, step_ + 1);
}

bool Trainer::log_due() const {
  if (!last_.read || last_.step != step_) return false;
  return step_ % tc_.logging.interval == 0 || step_ == tc_.steps || !last_.applied;
}

// The fields every metrics line has: the step's own numbers and the throughput of the interval
// so far (a skipped step's line, written when its step is read, shares its interval's rate).
Json Trainer::step_line(const StepResult& r) const {
  const double dt = since(t_log_);
  const double rate = dt > 0 ? static_cast<double>(tokens_ - tokens_at_log_) / dt : 0;
  const int64_t tokens = tokens_ - (step_ - r.step) * step_tokens_;
  Json m = {{"step", r.step}, {"tokens", tokens}, {"loss", r.loss}, {"lr", r.lr},
            {"grad_norm", r.grad_norm}, {"tokens_per_s", rate}, {"mfu", mfu_of(rate, peak_.flops)},
            {"mfu_measured_peak", mfu_of(rate, peak_.measured)}, {"elapsed_s", since(t_start_)}};
  if (nan_skipped_ > 0) m["nan_skipped"] = nan_skipped_;  // in the whole run so far
  if (!r.skipped.empty()) m["skipped"] = r.skipped;       // not applied: first non-finite parameter
  if (!sum_.fast_path_fallback.empty()) m["fast_path_fallback"] = sum_.fast_path_fallback;
  return m;
}

// Model FLOPs utilisation of `rate` tokens/s against `peak` FLOP/s per device (every rank brings
// its own device: world_size times one peak); 0 when the peak is unknown.
double Trainer::mfu_of(double rate, double peak) const {
  return peak > 0 ? rate * flops_per_token_ / (peak * req_.world_size) : 0;
}

// The metrics line of this step: throughput and MFU over the interval since the last line.
Json Trainer::measure(const StepResult& r) {
  Json m = step_line(r);
  t_log_ = Clock::now();
  tokens_at_log_ = tokens_;
  // The first interval of a start includes warm-up (allocator, kernel selection, compilation):
  // the summary's median MFU leaves it out unless it is the only one.
  if (lines_this_start_++ == 0) {
    first_mfu_ = m["mfu"].get<double>();
    first_mfu_measured_ = m["mfu_measured_peak"].get<double>();
  } else {
    mfus_.push_back(m["mfu"].get<double>());
    mfus_measured_.push_back(m["mfu_measured_peak"].get<double>());
  }
  check_floor();
  check_throughput(m["tokens_per_s"].get<double>());
  if (grad_sync_ && device_.is_cpu()) {
    // Per-step means over this log interval, rank 0's clock (ranks wait for the slowest). Not on
    // CUDA: the host does not wait for NCCL there (sync_gradients).
    m["step_time_s"] = interval_step_s_ / interval_steps_;
    m["comm_wait_s"] = interval_comm_s_ / interval_steps_;
    m["comm_wait_share"] = interval_step_s_ > 0 ? interval_comm_s_ / interval_step_s_ : 0;
  }
  interval_step_s_ = interval_comm_s_ = 0;
  interval_steps_ = 0;
  return m;
}

// The throughput sentinel: warns once when tokens/s falls well below this run's median.
void Trainer::check_throughput(double rate) {
  // The first interval includes warm-up (allocator, oneDNN primitives): keep it out of the median.
  if (step_ > tc_.logging.interval || step_ == tc_.steps) rates_.push_back(rate);
  if (rates_.size() >= 5 && rate < tc_.logging.sentinel_fraction * median(rates_) && !sentinel_warned_) {
    log_warn("throughput sentinel: %.0f tok/s is below %.0f%% of this run's median %.0f tok/s "
             "(another process on the machine? thermal throttling? a slow data path?)",
             rate, 100 * tc_.logging.sentinel_fraction, median(rates_));
    sentinel_warned_ = true;
  }
}

// The throughput floor (train.logging.mfu_floor): a run slow from its first step never trips the
// sentinel, which compares a run only with itself. Once two intervals after the warm-up (or the
// last step) show a median `mfu` below the floor of what the device allows, the next step is timed
// phase by phase and warn_floor says so with the split; at the last step, without it.
void Trainer::check_floor() {
  if (floor_fired_ || !(tc_.logging.mfu_floor > 0) || !(peak_.flops > 0) || mfus_.empty()) return;
  if (mfus_.size() < 2 && step_ != tc_.steps) return;
  if (median(mfus_) >= tc_.logging.mfu_floor) return;
  floor_fired_ = true;
  // Not into a CUDA graph's capture (it must not synchronize): then, and at the last step, no split.
  if (step_ < tc_.steps && !(graphs_ && !graph_)) split_.on = true;
  else warn_floor();
}

void Trainer::warn_floor() {
  const double m = median(mfus_);
  sum_.floor_warning = absl::StrFormat(
      "THROUGHPUT FLOOR: MFU %.2f%% (median of the %d intervals after warm-up, by step %d) is far below what this device "
      "allows: under %.0f%% (train.logging.mfu_floor) of %.3g TFLOP/s (%s)",
      100 * m, mfus_.size(), step_, 100 * tc_.logging.mfu_floor, peak_.flops / 1e12, peak_.source);
  std::string split = "no step: the floor was reached at the last step, or before a CUDA graph's capture";
  const double total = split_.forward + split_.backward + split_.optimizer;
  if (split_.done && total > 0)
    split = absl::StrFormat("step %d: forward %.3g s (%.0f%%), backward %.3g s (%.0f%%), optimizer %.3g s (%.0f%%)",
                            split_.step, split_.forward, 100 * split_.forward / total, split_.backward,
                            100 * split_.backward / total, split_.optimizer, 100 * split_.optimizer / total);
  else if (split_.done)
    split = "the step was a CUDA graph replay: no phases to time";
  if (!main_rank_) return;
  log_warn("%s", sum_.floor_warning);
  log_warn("  split of %s", split);
  log_warn("  likely: another process on this machine, too few threads, a slow kernel or fallback (docs/performance.md), "
           "or a model and batch too small for this device; train.logging.mfu_floor 0 turns this check off");
  sum_.floor_warning += "; " + split;
}

// Mean validation loss per language on eval_interval steps (and the last), into the line.
void Trainer::validate(Json& line) {
  if (tc_.eval.interval <= 0 || val_.empty() || (step_ % tc_.eval.interval != 0 && step_ != tc_.steps)) return;
  std::map<std::string, double> out;
  {
    torch::NoGradGuard no_grad;
    AutocastGuard ac(device_, bf16_);
    model_->eval();
    for (const auto& [lang, windows] : val_) {
      double total = 0;
      int64_t n = 0;
      for (size_t i = 0; i < windows.size() && static_cast<int64_t>(i) < tc_.eval.windows; ++i) {
        auto w = to_window_tensor(windows[i], 1, static_cast<int64_t>(windows[i].size()), device_);
        total += model_->loss(w).item<double>();
        ++n;
      }
      if (n > 0) out[lang] = total / n;
    }
    model_->train();
  }
  for (const auto& [lang, x] : out) line["val_loss"][lang] = x;
  sum_.val_loss = out;
  write_samples();
}

// Greedy text from fixed prompts at each validation (train/samples.h): samples.jsonl and
// TensorBoard's Text tab. Rank 0 only; a failed write warns, like TensorBoard, never stops a run.
void Trainer::write_samples() {
  if (!main_rank_ || tc_.eval.sample_tokens <= 0 || !req_.codec.usable()) return;
  if (sample_prompts_.empty()) sample_prompts_ = make_sample_prompts(tc_.eval.sample_prompts, val_, req_.codec);
  if (sample_prompts_.empty()) return;
  // fp32 as the weights are, or bf16 under autocast where the matmul weights are bf16 working
  // copies (the distributed optimizer): a bf16 weight does not multiply an fp32 input.
  AutocastGuard ac(device_, zero_ && zero_->bf16_working());
  const Json row = generate_samples(model_, sample_prompts_, tc_.eval.sample_tokens, req_.codec, step_, tokens_);
  // Not training time: the next line's tokens/s and MFU (and the throughput sentinel) leave it out.
  t_log_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(row["seconds"].get<double>()));
  const std::string path = RunFolder(req_.run_dir).samples();
  std::ofstream f(path, std::ios::app);
  f << row.dump() << "\n";
  f.flush();
  if (!f) log_warn("%s", stream_error(path).ToString());
  for (const Json& s : row["samples"])
    if (tensorboard_)
      (void)tensorboard_->add_text("samples/" + s["name"].get<std::string>(), step_,
                                   "**" + s["prompt"].get<std::string>() + "**" + s["completion"].get<std::string>(),
                                   unix_seconds());
  if (!samples_announced_)
    log_info("text samples: %d prompts, %d new tokens in %.3g s at each validation (samples.jsonl; "
             "train.eval.sample_tokens 0 turns them off)",
             sample_prompts_.size(), row["new_tokens"].get<int64_t>(), row["seconds"].get<double>());
  samples_announced_ = true;
}

// Appends the line to metrics.jsonl (rank 0) and updates the progress line.
absl::Status Trainer::write_metrics(const Json& m, const StepResult& r) {
  LM_RETURN_IF_ERROR(append_line(m));
  if (!main_rank_) return absl::OkStatus();
  const double mfu = m["mfu"].get<double>(), measured = m["mfu_measured_peak"].get<double>();
  std::string extra = absl::StrFormat("loss %.4f lr %.2e gnorm %.2f %.0f tok/s MFU %s", r.loss, r.lr, r.grad_norm,
                                      m["tokens_per_s"].get<double>(),
                                      mfu > 0 ? absl::StrFormat("%.1f%%", 100 * mfu) : std::string("n/a"));
  if (measured > 0 && std::abs(measured - mfu) > 1e-9) extra += absl::StrFormat(" (measured peak %.1f%%)", 100 * measured);
  if (m.contains("comm_wait_share"))
    extra += absl::StrFormat(" comm-wait %.0f%%", 100 * m["comm_wait_share"].get<double>());
  if (m.contains("val_loss"))
    for (const auto& [lang, x] : m["val_loss"].items()) extra += absl::StrFormat(" val_%s %.4f", lang, x.get<double>());
  progress_->update(static_cast<double>(step_), extra);
  return absl::OkStatus();
}

// Appends one line to metrics.jsonl (rank 0).
absl::Status Trainer::append_line(const Json& m) {
  if (!main_rank_) return absl::OkStatus();
  metrics_ << m.dump() << "\n";
  metrics_.flush();
  if (!metrics_) return stream_error(metrics_path_);
  write_tensorboard(m);  // skipped-step lines too
  return absl::OkStatus();
}

void Trainer::write_tensorboard(const Json& line) {
  if (!tensorboard_) return;
  absl::Status st = tensorboard_->add_metrics(line, unix_seconds());
  if (st.ok()) st = tensorboard_->flush();
  if (st.ok()) return;
  log_warn("TensorBoard events stop here (metrics.jsonl keeps every value): %s", st.ToString());
  tensorboard_.reset();
}

// Every checkpoint_interval steps, or when checkpoint_minutes passed since the last one (decided
// by stop_policy's agreement at the end of the previous step, so all ranks checkpoint the same
// step). Written in the background: the next steps run while rank 0's writer saves the snapshot.
absl::Status Trainer::checkpoint_if_due() {
  // A background write that failed (disk full) stops the run at the next step, not a period later.
  if (writer_ && !writer_->busy()) LM_RETURN_IF_ERROR(writer_->wait());
  const bool by_step = tc_.checkpoint.interval > 0 && step_ % tc_.checkpoint.interval == 0;
  const bool by_time = time_due_;
  time_due_ = false;
  if (step_ == tc_.steps || (!by_step && !by_time)) return absl::OkStatus();
  return checkpoint(/*wait=*/false);
}

// wait: the write is finished (and its error known) on return: the last step and a stop.
absl::Status Trainer::checkpoint(bool wait) {
  last_checkpoint_ = Clock::now();  // on every rank: the minutes count from here
  LM_RETURN_IF_ERROR(read_steps(/*logging_current=*/false));  // no checkpoint past an unread skip
  const auto t0 = Clock::now();
  // ZeRO-1: every rank writes its own part of the moments (train/sharded_checkpoint.h) and the
  // ranks agree it is written; rank 0's writer commits them with the step. Otherwise only rank 0
  // reads its own (the per-group step counts it reads are a host sync on a GPU).
  const std::string parts_dir = checkpoint_parts_dir(req_.run_dir, step_);
  if (zero_) LM_RETURN_IF_ERROR(write_optimizer_shards(parts_dir));
  model::NamedTensors optimizer, masters;
  if (!zero_ && main_rank_) optimizer = optimizer_state();
  if (zero_) masters = master_weights();  // the distributed optimizer's fp32 weights, whole, for model.safetensors
  if (!main_rank_) return absl::OkStatus();
  metrics_.flush();
  if (!writer_) writer_ = std::make_unique<CheckpointWriter>(req_.run_dir, tc_.checkpoint.keep_last);
  CheckpointSnapshot snap = snapshot_checkpoint(step_, model_, optimizer, trainer_state(), masters);
  if (zero_) {
    snap.optimizer_parts = parts_dir;
    snap.world = req_.comm->world();
    for (const auto& [name, t] : optim_->state())
      if (name.rfind("__step__", 0) == 0) snap.optimizer_steps[name] = t.item<int64_t>();
  }
  LM_RETURN_IF_ERROR(writer_->start(std::move(snap)));
  const double snap_s = since(t0);
  sum_.checkpoint = RunFolder(req_.run_dir).checkpoint(step_);
  if (!wait) return absl::OkStatus();  // the snapshot (snap_s) is all the step pays
  LM_RETURN_IF_ERROR(writer_->wait());
  log_info("checkpoint step %d written in %.2f s (snapshot %.2f s)", step_, since(t0), snap_s);
  return absl::OkStatus();
}

// ZeRO-1: this rank's file into `parts_dir`, then every rank learns whether all were written (a
// max on the CPU group). One failed write stops every rank: none commits a step without it.
absl::Status Trainer::write_optimizer_shards(const std::string& parts_dir) {
  const int rank = req_.comm->rank(), world = req_.comm->world();
  const absl::Status st = write_optimizer_shard(parts_dir, rank, world, *optim_);
  const int64_t failed = req_.comm->host_max(st.ok() ? 0 : rank + 1);  // the highest failed rank + 1
  if (failed == 0) return absl::OkStatus();
  auto latest = latest_checkpoint(req_.run_dir);
  const std::string kept = latest.ok() ? *latest + " (untouched, resume from it with --resume)" : std::string("none yet");
  const std::string name = RunFolder::step_name(step_);
  if (!st.ok())
    return absl::Status(st.code(), absl::StrCat("checkpoint ", name, " not written: rank ", rank, "'s optimizer file: ",
                                                st.message(), "; last good checkpoint: ", kept));
  return absl::AbortedError(absl::StrCat("checkpoint ", name, " not written: rank ", failed - 1, " could not write ",
                                         parts_dir, "/", optimizer_rank_file(static_cast<int>(failed) - 1, world),
                                         " (its log says why); last good checkpoint: ", kept));
}

Json Trainer::trainer_state() const {
  Json s;
  s["step"] = step_;
  s["tokens"] = tokens_;
  s["data_cursor"] = data_cursor();
  s["rng_cpu"] = cpu_rng_state();
  s["config"] = run_config_json(req_);
  s["tokenizer_hash"] = req_.tokenizer_hash;
  s["world_size"] = req_.world_size;
  s["rank"] = req_.rank;
  s["code_version"] = kCodeVersion;
  s["loss"] = last_loss_;
  s["nan_skipped"] = nan_skipped_;
  if (!device_.is_cuda()) s["threads"] = threads_;  // a resume keeps it (choose_threads)
  return s;
}

// train.stop_at_step, or SIGINT/SIGTERM on any rank. Ranks agree on stopping (a max over them),
// so they checkpoint the same step and none waits on a dead peer.
Trainer::Stop Trainer::stop_policy() {
  if (step_ == tc_.stop_at_step && step_ != tc_.steps) return Stop::kAtStep;
  // One agreement for both: rank 0's clock says whether checkpoint_minutes passed (the low bit),
  // any rank's signal says stop (a stop checkpoints anyway, so the bit then does not matter).
  const bool due = main_rank_ && tc_.checkpoint.minutes > 0 && since(last_checkpoint_) >= 60 * tc_.checkpoint.minutes;
  int sig = lm::stop_signal();
  int agreed = 2 * sig + (due ? 1 : 0);
  if (req_.comm != nullptr) {
    // Ranks agree only on the steps where the loop reads its results anyway (read_due: log,
    // checkpoint and last steps, the same on every rank): the max all-reduce waits for the device
    // on NCCL, so the steps between stay free of host syncs, as on one GPU. A signal or a due
    // time checkpoint waits for that step (at most train.logging.interval steps).
    if (!read_due()) return Stop::kNo;
    agreed = static_cast<int>(req_.comm->max(agreed));
    ++sum_.rank_agreements;
  }
  sig = agreed / 2;
  time_due_ = agreed % 2 == 1;
  if (sig == 0) return Stop::kNo;
  sum_.stop_signal = sig;
  return Stop::kSignal;
}

// Where a step can be dropped between micro-batches (a stop signal, a shard that shrank): not in a
// CUDA graph (a replay is one launch). With data parallel the ranks agree before every micro-batch
// (drop_step_now).
bool Trainer::can_drop_step() const { return !graphs_; }

// Whether the step in flight is dropped before its next micro-batch: a stop signal, or a shard
// that shrank under an earlier one. With data parallel every rank asks the others first
// (Comm::host_max, on the CPU: no wait for the GPU), so all drop the same step at the same
// micro-batch, before the last one's backward starts the gradient all-reduce that would leave a
// rank that went on waiting for the ones that stopped.
bool Trainer::drop_step_now() {
  int64_t v = 2 * static_cast<int64_t>(lm::stop_signal()) + (mapped_file_fault().empty() ? 0 : 1);
  if (req_.comm != nullptr) {
    v = req_.comm->host_max(v);
    ++sum_.micro_agreements;
  }
  mid_step_signal_ = static_cast<int>(v / 2);
  mid_step_fault_ = v % 2 == 1;
  return v != 0;
}

// The step in flight is dropped whole: its partial gradients are discarded and the data stream
// goes back to the step's start, so the checkpoint of the last complete step resumes bit-identically
// (the step is redone from its first micro-batch).
absl::Status Trainer::stop_mid_step() {
  optim_->zero_grad();
  ahead_ = torch::Tensor();
  LM_RETURN_IF_ERROR(annotate(source_.restore(step_cursor_), "rewinding the data stream to the step's start"));
  const std::string shard = mapped_file_fault();
  const bool fault = !shard.empty() || mid_step_fault_;  // here or on another rank (the agreement)
  if (!fault) sum_.stop_signal = std::max(lm::stop_signal(), mid_step_signal_);
  LM_RETURN_IF_ERROR(checkpoint(/*wait=*/true));  // every rank: the checkpoint is collective
  if (fault && shard.empty())
    return absl::DataLossError(absl::StrFormat(
        "a shard shrank under another rank while fit was reading it; step %d dropped on every rank, stopped after "
        "step %d with a checkpoint (that rank's log names the file). Put the shards back and --resume",
        step_ + 1, step_));
  if (!shard.empty())
    return absl::DataLossError(absl::StrFormat(
        "%s: the file shrank while fit was reading it (a read past its new end; it was checked when opened); step %d "
        "dropped, stopped after step %d with a checkpoint. Put the shards back as 'lmtrain prepare' wrote them (or "
        "prepare into a new folder) and --resume",
        shard, step_ + 1, step_));
  log_warn("signal %d during step %d (after %d of its %d micro-batches): the step is dropped, its partial gradients "
           "discarded; stopped after step %d with a checkpoint; continue with --resume",
           sum_.stop_signal, step_ + 1, micro_done_, tc_.batch.grad_accum, step_);
  return absl::OkStatus();
}

// Where a step cannot be dropped (data parallel, CUDA graphs), a shard that shrank under the run
// ends it here, before the step's results are logged or checkpointed: it trained on zeros.
absl::Status Trainer::check_data_intact() const {
  const std::string shard = mapped_file_fault();
  if (shard.empty()) return absl::OkStatus();
  auto latest = latest_checkpoint(req_.run_dir);
  return absl::DataLossError(absl::StrFormat(
      "%s: the file shrank while fit was reading it; step %d read zeros in its place and is not checkpointed; last "
      "good checkpoint: %s. Put the shards back as 'lmtrain prepare' wrote them and --resume",
      shard, step_, latest.ok() ? *latest : std::string("none yet")));
}

void Trainer::announce_stop(Stop why) {
  if (why == Stop::kAtStep)
    log_info("stopped at step %d as asked (train.stop_at_step); continue with --resume", step_);
  else
    log_warn("signal %d: stopped after step %d with a checkpoint; continue with --resume", sum_.stop_signal, step_);
}

// What `lmtrain plan` counts per GPU for this run's model, batch and strategy (its total: fixed
// terms, one micro-batch's activations), beside the peak the device saw; 0 if it cannot say.
double Trainer::planned_device_bytes() const {
  PlanRequest p;
  p.model = req_.model;
  p.seq_len = tc_.batch.seq_len;
  p.micro_batch = tc_.batch.micro_batch;
  p.n_gpus = req_.comm != nullptr ? req_.comm->world() : 1;
  p.zero = zero_ != nullptr;
  p.sharded_master = zero_ != nullptr && zero_->bf16_working();
  p.recompute = tc_.hardware.recompute;
  p.peak_flops = 1e15;    // neither is read for memory: no GPU table lookup
  p.memory_bytes = 80e9;
  auto plan = make_plan(p);
  return plan.ok() ? plan->memory.total() : 0;
}

FitSummary Trainer::finish() const {
  FitSummary sum = sum_;
  sum.steps = step_;
  sum.optimizer_bytes = optim_->moment_bytes();
  sum.master_bytes = zero_ ? zero_->master_bytes() : 0;
  for (const auto& p : plist_) sum.weight_bytes += p.numel() * p.element_size();
  sum.peak_device_bytes = device_peak_allocated_bytes(device_);
  if (sum.peak_device_bytes > 0 && bf16_) sum.plan_device_bytes = planned_device_bytes();
  sum.tokens = tokens_;
  sum.seconds = since(t_start_);
  sum.tokens_per_s =
      sum.seconds > 0 ? static_cast<double>((step_ - sum.start_step) * step_tokens_) / sum.seconds : 0;
  // The median interval's MFU, not the best or the last: one interval on a busy machine swings.
  const bool intervals = !mfus_.empty();
  sum.mfu = intervals ? median(mfus_) : lines_this_start_ > 0 ? first_mfu_ : mfu_of(sum.tokens_per_s, peak_.flops);
  sum.mfu_measured_peak = intervals ? median(mfus_measured_) : lines_this_start_ > 0 ? first_mfu_measured_
                                                                                     : mfu_of(sum.tokens_per_s, peak_.measured);
  sum.mfu_intervals = intervals ? static_cast<int64_t>(mfus_.size()) : std::min<int64_t>(lines_this_start_, 1);
  sum.final_loss = last_loss_;
  sum.nan_skipped = nan_skipped_;
  return sum;
}

}  // namespace lm::train
