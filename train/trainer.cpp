#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "core/runtime.h"
#include "model/transformer.h"
#include "model/verify.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/distributed.h"
#include "train/grad_sync.h"
#include "train/hf_export.h"
#include "train/optim.h"

namespace lm::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kCodeVersion = "lmforge 0.1.0";

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  for (const char* key : {"micro_batch", "seq_len", "grad_accum", "seed"}) {
    if (saved["config"]["train"][key] != now["train"][key]) {
      return absl::FailedPreconditionError(absl::StrCat(
          ckpt, ": train.", key, " was ", saved["config"]["train"][key].dump(), " but is now ",
          now["train"][key].dump(), "; a resume with another batch layout would not see the same data"));
    }
  }
  if (saved["tokenizer_hash"] != req.tokenizer_hash) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt, ": checkpoint used tokenizer ", saved["tokenizer_hash"].dump(), " but the data now has ",
        req.tokenizer_hash, "; use the shards the run was started with"));
  }
  if (saved["world_size"] != req.world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt, ": checkpoint was written by ", saved["world_size"].dump(), " ranks but ", req.world_size,
        " are running; the data-parallel layout must match to resume the data cursor exactly"));
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
  std::string s = absl::StrFormat(
      "trained %d steps (%s tokens) in %s: %.0f tok/s, MFU %s, final train loss %.4f nats/token",
      steps, format_count(static_cast<double>(tokens)), format_duration(seconds), tokens_per_s,
      mfu > 0 ? absl::StrFormat("%.1f%%", 100 * mfu) : std::string("n/a"), final_loss);
  for (const auto& [lang, v] : val_loss) s += absl::StrFormat("\n  val loss %s: %.4f nats/token", lang, v);
  if (comm_wait_s > 0)
    s += absl::StrFormat("\n  gradient all-reduce wait: %.2f s of %.2f s step time (%.1f%%)", comm_wait_s, step_s,
                         step_s > 0 ? 100 * comm_wait_s / step_s : 0.0);
  if (nan_skipped > 0)
    s += absl::StrFormat("\n  skipped %d updates with a non-finite loss or gradient (train.nan_skip_limit)", nan_skipped);
  if (!checkpoint.empty()) s += "\n  checkpoint: " + checkpoint;
  return s;
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
      device_(req.train.device == "cuda" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(req.local_rank))
                                         : torch::Device(torch::kCPU)),
      bf16_(req.train.dtype == "bf16"),
      faults_(req.train) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const FitRequest& req_in, BatchSource& source,
                                                         const ValSets& val) {
  FitRequest req = req_in;
  LM_RETURN_IF_ERROR(model::validate(req.model));
  LM_RETURN_IF_ERROR(resolve(req.train, req.model, req.world_size));
  LM_RETURN_IF_ERROR(RunFolder(req.run_dir).open(req.resume, req.force));
  std::unique_ptr<Trainer> t(new Trainer(req, source, val));
  LM_RETURN_IF_ERROR(t->build_model());
  LM_RETURN_IF_ERROR(t->restore_or_start());
  LM_RETURN_IF_ERROR(t->startup_checks());
  t->start_grad_sync();
  t->announce();
  LM_RETURN_IF_ERROR(t->open_metrics());
  return t;
}

absl::Status Trainer::build_model() {
  if (device_.is_cuda() && !torch::cuda::is_available())
    return absl::FailedPreconditionError("train.device is cuda but no CUDA device is visible");
  if (tc_.threads > 0) setup_threads(tc_.threads);
  torch::manual_seed(tc_.seed);
  model_ = model::Transformer(req_.model);
  model_->init_weights(tc_.seed);
  if (!req_.init_from.empty() && !req_.resume) LM_RETURN_IF_ERROR(init_from_hf(req_.init_from, model_));
  model_->to(device_);
  model_->train();
  for (const auto& p : model_->named_parameters()) params_.emplace_back(p.key(), p.value());
  optim_ = std::make_unique<AdamW>(params_, tc_);
  for (auto& [n, p] : params_) plist_.push_back(p);
  if (req_.comm != nullptr) {
    // Every rank must run the same job; then start from rank 0's weights.
    LM_RETURN_IF_ERROR(req_.comm->check_same("run config", run_config_json(req_).dump()));
    std::vector<torch::Tensor> state = plist_;
    req_.comm->broadcast(state);
  }
  return absl::OkStatus();
}

absl::Status Trainer::restore_or_start() {
  if (!req_.resume) return write_run_config();
  if (!fs::exists(RunFolder(req_.run_dir).latest())) {
    // Killed before its first checkpoint: the run starts over from step 0 with its own config
    // (the model above is initialised from the same seed as a fresh start).
    if (main_rank_) LM_RETURN_IF_ERROR(truncate_metrics(metrics_path_, 0));
    log_info("%s: no checkpoint yet; starting the run from step 0 with its config.json", req_.run_dir);
    return write_run_config();
  }
  LM_ASSIGN_OR_RETURN(std::string ckpt, find_checkpoint(req_.run_dir, -1));
  LM_ASSIGN_OR_RETURN(Json state, read_trainer_state(ckpt));
  LM_RETURN_IF_ERROR(check_resume_compatible(state, req_, ckpt));
  LM_RETURN_IF_ERROR(load_model(ckpt, model_));
  LM_RETURN_IF_ERROR(load_optimizer(ckpt, *optim_));
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
  if (main_rank_) LM_RETURN_IF_ERROR(truncate_metrics(metrics_path_, step_));
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

// Start-up verification on the real config: refuse to train a model that cannot learn.
absl::Status Trainer::startup_checks() {
  if (!tc_.verify_at_start || step_ != 0) return absl::OkStatus();
  auto grad = model::check_gradient_flow(model_, 1, std::min<int64_t>(tc_.seq_len, 64), tc_.seed + 1);
  if (!grad.ok()) return absl::InternalError("start-up verification failed, not training:\n" + grad.summary());
  log_info("%s", grad.summary());
  return absl::OkStatus();
}

// Gradient averaging: hooks are registered after the start-up check so its backward stays local.
void Trainer::start_grad_sync() {
  Comm* comm = req_.comm;
  if (comm == nullptr) return;
  grad_sync_ = std::make_unique<GradSync>(
      plist_, comm->world(), [comm](torch::Tensor t) { return comm->start_sum(std::move(t)); }, tc_.ddp_overlap,
      static_cast<int64_t>(tc_.ddp_bucket_mb * (1 << 20)));
  if (main_rank_)
    log_info("data parallel: %d ranks, %s, gradient all-reduce %s backward%s", comm->world(), comm->backend(),
             tc_.ddp_overlap ? "overlapped with" : "after",
             tc_.ddp_overlap ? absl::StrFormat(" (%d buckets of <= %.0f MiB)", grad_sync_->stats().buckets, tc_.ddp_bucket_mb)
                             : std::string());
}

// The device peak (for MFU) and the banner: versions, model, batch, budget.
void Trainer::announce() {
  peak_ = device_peak(device_, bf16_ ? torch::kBFloat16 : torch::kFloat32, tc_.peak_flops);
  flops_per_token_ = model::train_flops_per_token(req_.model, tc_.seq_len);
  step_tokens_ = tokens_per_step(tc_, req_.world_size);
  sum_.start_step = step_;
  sum_.peak_source = peak_.source;
  if (!main_rank_) return;
  for (const auto& line : absl::StrSplit(version_report("lmtrain fit"), '\n')) log_info("%s", std::string(line));
  log_info("model %s: %s params, %.3g FLOPs/token; batch %d x %d x accum %d = %s tokens/step; %d steps; peak %s (%s)",
           req_.model.preset, format_count(static_cast<double>(model::param_count(req_.model))), flops_per_token_,
           tc_.micro_batch, tc_.seq_len, tc_.grad_accum, format_count(static_cast<double>(step_tokens_)), tc_.steps,
           peak_.flops > 0 ? absl::StrFormat("%.1f TFLOP/s", peak_.flops / 1e12) : std::string("unknown"),
           peak_.source);
}

absl::Status Trainer::open_metrics() {
  if (!main_rank_) return absl::OkStatus();
  metrics_.open(metrics_path_, std::ios::app);
  if (!metrics_) return stream_error(metrics_path_);
  return absl::OkStatus();
}

// ---- The loop ----------------------------------------------------------------------------------

absl::StatusOr<FitSummary> Trainer::train() {
  progress_ = std::make_unique<Progress>("train", static_cast<double>(tc_.steps), "steps");
  t_start_ = t_log_ = Clock::now();
  tokens_at_log_ = tokens_;
  while (step_ < tc_.steps) {
    StepResult r = train_step();
    LM_RETURN_IF_ERROR(handle_non_finite(r));  // skip the update, or stop past train.nan_skip_limit
    advance(r);                                // step and token counters, timings, loss history
    if (log_due(r)) {
      Json line = measure(r);  // throughput, MFU, the throughput sentinel
      validate(line);          // validation loss on eval_interval steps
      LM_RETURN_IF_ERROR(write_metrics(line, r));
    }
    LM_RETURN_IF_ERROR(checkpoint_if_due());
    if (const Stop why = stop_policy(); why != Stop::kNo) {  // train.stop_at_step, SIGINT/SIGTERM
      LM_RETURN_IF_ERROR(checkpoint());
      announce_stop(why);
      break;
    }
  }
  if (step_ == tc_.steps && sum_.stop_signal == 0) LM_RETURN_IF_ERROR(checkpoint());
  return finish();
}

// ---- The step ----------------------------------------------------------------------------------

StepResult Trainer::train_step() {
  StepResult r;
  r.lr = lr_at(tc_, step_);
  const FaultInjector::Site fault = faults_.at(step_);
  const auto t_step = Clock::now();
  optim_->zero_grad();
  r.loss = accumulate_gradients(fault);
  if (grad_sync_) r.comm_wait_s = sync_gradients(&r.loss);
  if (fault == FaultInjector::Site::kGradient) FaultInjector::poison_gradient(params_);
  r.grad_norm = clip_grad_norm(plist_, tc_.grad_clip);
  // A non-finite loss or gradient is never applied; handle_non_finite skips the step or stops.
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) optim_->step(r.lr);
  r.seconds = since(t_step);
  return r;
}

// Forward and backward of grad_accum micro-batches; returns their mean loss.
double Trainer::accumulate_gradients(FaultInjector::Site fault) {
  AutocastGuard ac(device_, bf16_);
  double step_loss = 0;
  for (int64_t micro = 0; micro < tc_.grad_accum; ++micro) {
    source_.next(&flat_);
    auto window = to_window_tensor(flat_, tc_.micro_batch, tc_.seq_len + 1, device_);
    auto loss = model_->loss(window) / static_cast<double>(tc_.grad_accum);
    if (fault == FaultInjector::Site::kLoss) loss = FaultInjector::poison_loss(loss);
    // Only the last micro-batch's backward all-reduces (the others accumulate locally).
    if (grad_sync_) grad_sync_->before_backward(micro == tc_.grad_accum - 1);
    loss.backward();
    step_loss += loss.item<double>();
  }
  return step_loss;
}

// Waits for the gradient all-reduce and averages *loss over ranks; returns the seconds blocked:
// all of the all-reduce on the post-backward path, only what backward did not hide when
// overlapped. On CUDA, NCCL's wait() only orders streams, so synchronize to see the exposed time
// on the host clock.
double Trainer::sync_gradients(double* loss) {
  const auto t_wait = Clock::now();
  grad_sync_->finish();
  if (device_.is_cuda()) torch::cuda::synchronize();
  const double wait = since(t_wait);
  sum_.buckets_in_backward += grad_sync_->stats().launched_in_backward;
  sum_.buckets_synced += grad_sync_->stats().buckets;
  *loss = req_.comm->sum(*loss) / req_.comm->world();
  return wait;
}

// ---- The parts after the step ------------------------------------------------------------------

// A step that was not applied: skip it (up to train.nan_skip_limit in the whole run) or stop with
// the last good checkpoint named.
absl::Status Trainer::handle_non_finite(StepResult& r) {
  if (r.applied) return absl::OkStatus();
  std::string culprit = "none (the loss itself)";
  for (auto& [n, p] : params_) {
    if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) {
      culprit = n;
      break;
    }
  }
  const std::string what = absl::StrFormat("step %d: non-finite %s (loss %g, grad norm %g), first bad parameter: %s",
                                           step_ + 1, std::isfinite(r.loss) ? "gradient" : "loss", r.loss,
                                           r.grad_norm, culprit);
  if (nan_skipped_ >= tc_.nan_skip_limit) {
    std::string last = "none yet";
    auto latest = latest_checkpoint(req_.run_dir);
    if (latest.ok()) last = *latest;
    const std::string limit =
        tc_.nan_skip_limit > 0
            ? absl::StrFormat(" (%d earlier steps skipped, train.nan_skip_limit is %d)", nan_skipped_, tc_.nan_skip_limit)
            : std::string();
    return absl::InternalError(absl::StrFormat(
        "%s; stopped without applying the step%s; last good checkpoint: %s (lower train.lr or check the data, "
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
  if (r.applied) last_loss_ = r.loss;
  sum_.losses.push_back(r.loss);
}

bool Trainer::log_due(const StepResult& r) const {
  return step_ % tc_.log_interval == 0 || step_ == tc_.steps || !r.applied;
}

// The metrics line of this step: throughput and MFU over the interval since the last line.
Json Trainer::measure(const StepResult& r) {
  const double dt = since(t_log_);
  const double rate = dt > 0 ? static_cast<double>(tokens_ - tokens_at_log_) / dt : 0;
  t_log_ = Clock::now();
  tokens_at_log_ = tokens_;
  check_throughput(rate);
  const double mfu = peak_.flops > 0 ? rate * flops_per_token_ / (peak_.flops * req_.world_size) : 0;
  Json m = {{"step", step_}, {"tokens", tokens_}, {"loss", r.loss}, {"lr", r.lr},
            {"grad_norm", r.grad_norm}, {"tokens_per_s", rate}, {"mfu", mfu},
            {"elapsed_s", since(t_start_)}};
  if (nan_skipped_ > 0) m["nan_skipped"] = nan_skipped_;  // in the whole run so far
  if (!r.skipped.empty()) m["skipped"] = r.skipped;       // not applied: first non-finite parameter
  if (grad_sync_) {
    // Per-step means over this log interval, rank 0's clock (ranks wait for the slowest).
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
  if (step_ > tc_.log_interval || step_ == tc_.steps) rates_.push_back(rate);
  if (rates_.size() >= 5 && rate < tc_.sentinel_fraction * median(rates_) && !sentinel_warned_) {
    log_warn("throughput sentinel: %.0f tok/s is below %.0f%% of this run's median %.0f tok/s "
             "(another process on the machine? thermal throttling? a slow data path?)",
             rate, 100 * tc_.sentinel_fraction, median(rates_));
    sentinel_warned_ = true;
  }
}

// Mean validation loss per language on eval_interval steps (and the last), into the line.
void Trainer::validate(Json& line) {
  if (tc_.eval_interval <= 0 || val_.empty() || (step_ % tc_.eval_interval != 0 && step_ != tc_.steps)) return;
  std::map<std::string, double> out;
  {
    torch::NoGradGuard no_grad;
    AutocastGuard ac(device_, bf16_);
    model_->eval();
    for (const auto& [lang, windows] : val_) {
      double total = 0;
      int64_t n = 0;
      for (size_t i = 0; i < windows.size() && static_cast<int64_t>(i) < tc_.eval_windows; ++i) {
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
}

// Appends the line to metrics.jsonl (rank 0) and updates the progress line.
absl::Status Trainer::write_metrics(const Json& m, const StepResult& r) {
  if (!main_rank_) return absl::OkStatus();
  metrics_ << m.dump() << "\n";
  metrics_.flush();
  if (!metrics_) return stream_error(metrics_path_);
  const double mfu = m["mfu"].get<double>();
  std::string extra = absl::StrFormat("loss %.4f lr %.2e gnorm %.2f %.0f tok/s MFU %s", r.loss, r.lr, r.grad_norm,
                                      m["tokens_per_s"].get<double>(),
                                      mfu > 0 ? absl::StrFormat("%.1f%%", 100 * mfu) : std::string("n/a"));
  if (m.contains("comm_wait_share"))
    extra += absl::StrFormat(" comm-wait %.0f%%", 100 * m["comm_wait_share"].get<double>());
  if (m.contains("val_loss"))
    for (const auto& [lang, x] : m["val_loss"].items()) extra += absl::StrFormat(" val_%s %.4f", lang, x.get<double>());
  progress_->update(static_cast<double>(step_), extra);
  return absl::OkStatus();
}

absl::Status Trainer::checkpoint_if_due() {
  if (tc_.checkpoint_interval > 0 && step_ % tc_.checkpoint_interval == 0 && step_ != tc_.steps) return checkpoint();
  return absl::OkStatus();
}

absl::Status Trainer::checkpoint() {
  if (!main_rank_) return absl::OkStatus();
  metrics_.flush();
  LM_RETURN_IF_ERROR(save_checkpoint(req_.run_dir, step_, model_, *optim_, trainer_state(), tc_.keep_last));
  sum_.checkpoint = RunFolder(req_.run_dir).checkpoint(step_);
  return absl::OkStatus();
}

Json Trainer::trainer_state() const {
  Json s;
  s["step"] = step_;
  s["tokens"] = tokens_;
  s["data_cursor"] = source_.cursor();
  s["rng_cpu"] = cpu_rng_state();
  s["config"] = run_config_json(req_);
  s["tokenizer_hash"] = req_.tokenizer_hash;
  s["world_size"] = req_.world_size;
  s["rank"] = req_.rank;
  s["code_version"] = kCodeVersion;
  s["loss"] = last_loss_;
  s["nan_skipped"] = nan_skipped_;
  return s;
}

// train.stop_at_step, or SIGINT/SIGTERM on any rank. Ranks agree on stopping (a max over them),
// so they checkpoint the same step and none waits on a dead peer.
Trainer::Stop Trainer::stop_policy() {
  if (step_ == tc_.stop_at_step && step_ != tc_.steps) return Stop::kAtStep;
  int sig = lm::stop_signal();
  if (req_.comm != nullptr) sig = static_cast<int>(req_.comm->max(sig));
  if (sig == 0) return Stop::kNo;
  sum_.stop_signal = sig;
  return Stop::kSignal;
}

void Trainer::announce_stop(Stop why) {
  if (why == Stop::kAtStep)
    log_info("stopped at step %d as asked (train.stop_at_step); continue with --resume", step_);
  else
    log_warn("signal %d: stopped after step %d with a checkpoint; continue with --resume", sum_.stop_signal, step_);
}

FitSummary Trainer::finish() const {
  FitSummary sum = sum_;
  sum.steps = step_;
  sum.tokens = tokens_;
  sum.seconds = since(t_start_);
  sum.tokens_per_s =
      sum.seconds > 0 ? static_cast<double>((step_ - sum.start_step) * step_tokens_) / sum.seconds : 0;
  // Every rank brings its own device: MFU is against world_size times one peak.
  sum.mfu = peak_.flops > 0 ? sum.tokens_per_s * flops_per_token_ / (peak_.flops * req_.world_size) : 0;
  sum.final_loss = last_loss_;
  sum.nan_skipped = nan_skipped_;
  return sum;
}

}  // namespace lm::train
