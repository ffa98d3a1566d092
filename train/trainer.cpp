#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/log.h"
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

// Keeps metrics.jsonl lines up to `step` so a resumed run's log equals an uninterrupted one.
absl::Status truncate_metrics(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return absl::OkStatus();
  LM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::istringstream in(text);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (Json::parse(line).value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (...) {
      break;  // a torn last line from a kill
    }
  }
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

absl::StatusOr<FitSummary> fit(const FitRequest& req_in, BatchSource& source, const ValSets& val) {
  FitRequest req = req_in;
  LM_RETURN_IF_ERROR(model::validate(req.model));
  LM_RETURN_IF_ERROR(resolve(req.train, req.model, req.world_size));
  const TrainConfig& tc = req.train;
  const bool main_rank = req.rank == 0;

  // Run folder policy: never overwrite a run by accident.
  const fs::path run(req.run_dir);
  const bool exists = fs::exists(run / "config.json");
  if (exists && !req.resume && !req.force) {
    return absl::AlreadyExistsError(absl::StrCat(
        req.run_dir, ": a run already exists here (continue it with --resume, or pass --force to start over)"));
  }
  if (req.resume && !exists) {
    return absl::NotFoundError(req.run_dir + ": no run to resume (no config.json); start it without --resume");
  }
  std::error_code ec;
  if (req.force && !req.resume) {
    fs::remove_all(run / "checkpoints", ec);
    fs::remove(run / "latest", ec);
    fs::remove(run / "metrics.jsonl", ec);
  }
  fs::create_directories(run, ec);
  if (ec) return absl::InternalError(absl::StrCat(req.run_dir, ": cannot create: ", ec.message()));

  torch::Device device(tc.device == "cuda" ? torch::kCUDA : torch::kCPU);
  if (device.is_cuda() && !torch::cuda::is_available())
    return absl::FailedPreconditionError("train.device is cuda but no CUDA device is visible");
  if (tc.threads > 0) setup_threads(tc.threads);

  torch::manual_seed(tc.seed);
  model::Transformer model(req.model);
  model->init_weights(tc.seed);
  if (!req.init_from.empty() && !req.resume) LM_RETURN_IF_ERROR(init_from_hf(req.init_from, model));
  model->to(device);
  model->train();
  auto named = model->named_parameters();
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : named) params.emplace_back(p.key(), p.value());
  AdamW optim(params, tc);
  std::vector<torch::Tensor> plist;
  for (auto& [n, p] : params) plist.push_back(p);
  Comm* comm = req.comm;
  if (comm != nullptr) {
    // Every rank must run the same job; then start from rank 0's weights.
    LM_RETURN_IF_ERROR(comm->check_same("run config", run_config_json(req).dump()));
    std::vector<torch::Tensor> state;
    for (auto& p : plist) state.push_back(p);
    comm->broadcast(state);
  }

  int64_t step = 0, tokens = 0;
  int64_t nan_skipped = 0;  // updates skipped for a non-finite loss/gradient, whole run (train.nan_skip_limit)
  const std::string metrics_path = (run / "metrics.jsonl").string();
  if (req.resume) {
    LM_ASSIGN_OR_RETURN(std::string ckpt, find_checkpoint(req.run_dir, -1));
    LM_ASSIGN_OR_RETURN(Json state, read_trainer_state(ckpt));
    LM_RETURN_IF_ERROR(check_resume_compatible(state, req, ckpt));
    LM_RETURN_IF_ERROR(load_model(ckpt, model));
    LM_RETURN_IF_ERROR(load_optimizer(ckpt, optim));
    LM_RETURN_IF_ERROR(annotate(source.restore(state["data_cursor"]), ckpt + "/trainer.json data_cursor"));
    if (state.contains("rng_cpu")) LM_RETURN_IF_ERROR(set_cpu_rng_state(state["rng_cpu"].get<std::string>()));
    step = state["step"].get<int64_t>();
    tokens = state["tokens"].get<int64_t>();
    nan_skipped = state.value("nan_skipped", int64_t{0});
    if (main_rank) LM_RETURN_IF_ERROR(truncate_metrics(metrics_path, step));
    log_info("resumed from %s (step %d, %s tokens)", ckpt, step, format_count(static_cast<double>(tokens)));
  } else if (main_rank) {
    LM_RETURN_IF_ERROR(write_json_file((run / "config.json").string(), run_config_json(req)));
  }

  // Start-up verification on the real config: refuse to train a model that cannot learn.
  if (tc.verify_at_start && step == 0) {
    auto grad = model::check_gradient_flow(model, 1, std::min<int64_t>(tc.seq_len, 64), tc.seed + 1);
    if (!grad.ok())
      return absl::InternalError("start-up verification failed, not training:\n" + grad.summary());
    log_info("%s", grad.summary());
  }

  // Gradient averaging: hooks are registered after the start-up check so its backward stays local.
  std::unique_ptr<GradSync> grad_sync;
  if (comm != nullptr) {
    grad_sync = std::make_unique<GradSync>(
        plist, comm->world(), [comm](torch::Tensor t) { return comm->start_sum(std::move(t)); }, tc.ddp_overlap,
        static_cast<int64_t>(tc.ddp_bucket_mb * (1 << 20)));
    if (main_rank)
      log_info("data parallel: %d ranks, %s, gradient all-reduce %s backward%s", comm->world(), comm->backend(),
               tc.ddp_overlap ? "overlapped with" : "after",
               tc.ddp_overlap ? absl::StrFormat(" (%d buckets of <= %.0f MiB)", grad_sync->stats().buckets, tc.ddp_bucket_mb)
                              : std::string());
  }

  const bool bf16 = tc.dtype == "bf16";
  const DevicePeak peak = device_peak(device, bf16 ? torch::kBFloat16 : torch::kFloat32, tc.peak_flops);
  const double flops_per_token = model::train_flops_per_token(req.model, tc.seq_len);
  const int64_t step_tokens = tokens_per_step(tc, req.world_size);
  if (main_rank) {
    for (const auto& line : absl::StrSplit(version_report("lmtrain fit"), '\n')) log_info("%s", std::string(line));
    log_info("model %s: %s params, %.3g FLOPs/token; batch %d x %d x accum %d = %s tokens/step; %d steps; peak %s (%s)",
             req.model.preset, format_count(static_cast<double>(model::param_count(req.model))),
             flops_per_token, tc.micro_batch, tc.seq_len, tc.grad_accum,
             format_count(static_cast<double>(step_tokens)), tc.steps,
             peak.flops > 0 ? absl::StrFormat("%.1f TFLOP/s", peak.flops / 1e12) : std::string("unknown"),
             peak.source);
  }

  std::ofstream metrics;
  if (main_rank) metrics.open(metrics_path, std::ios::app);
  if (main_rank && !metrics) return stream_error(metrics_path);

  auto trainer_state = [&](double loss) {
    Json s;
    s["step"] = step;
    s["tokens"] = tokens;
    s["data_cursor"] = source.cursor();
    s["rng_cpu"] = cpu_rng_state();
    s["config"] = run_config_json(req);
    s["tokenizer_hash"] = req.tokenizer_hash;
    s["world_size"] = req.world_size;
    s["rank"] = req.rank;
    s["code_version"] = kCodeVersion;
    s["loss"] = loss;
    s["nan_skipped"] = nan_skipped;
    return s;
  };
  FitSummary sum;
  sum.start_step = step;
  sum.peak_source = peak.source;
  auto checkpoint = [&](double loss) -> absl::Status {
    if (!main_rank) return absl::OkStatus();
    metrics.flush();
    LM_RETURN_IF_ERROR(save_checkpoint(req.run_dir, step, model, optim, trainer_state(loss), tc.keep_last));
    sum.checkpoint = (run / "checkpoints" / checkpoint_name(step)).string();
    return absl::OkStatus();
  };
  auto evaluate = [&]() {
    std::map<std::string, double> out;
    torch::NoGradGuard no_grad;
    AutocastGuard ac(device, bf16);
    model->eval();
    for (const auto& [lang, windows] : val) {
      double total = 0;
      int64_t n = 0;
      for (size_t i = 0; i < windows.size() && static_cast<int64_t>(i) < tc.eval_windows; ++i) {
        auto w = to_window_tensor(windows[i], 1, static_cast<int64_t>(windows[i].size()), device);
        total += model->loss(w).item<double>();
        ++n;
      }
      if (n > 0) out[lang] = total / n;
    }
    model->train();
    return out;
  };

  std::vector<int32_t> flat;
  std::vector<double> rates;
  const auto t_start = Clock::now();
  auto t_log = Clock::now();
  int64_t tokens_at_log = tokens;
  double last_loss = 0;
  bool sentinel_warned = false;
  double interval_step_s = 0, interval_comm_s = 0;  // summed over the steps since the last log line
  int64_t interval_steps = 0;
  Progress progress("train", static_cast<double>(tc.steps), "steps");
  while (step < tc.steps) {
    const double lr = lr_at(tc, step);
    const bool inject_nan = tc.inject_nan_step >= 0 && step >= tc.inject_nan_step &&
                            step < tc.inject_nan_step + tc.inject_nan_steps;
    const auto t_step = Clock::now();
    optim.zero_grad();
    double step_loss = 0;
    {
      AutocastGuard ac(device, bf16);
      for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
        source.next(&flat);
        auto window = to_window_tensor(flat, tc.micro_batch, tc.seq_len + 1, device);
        auto loss = model->loss(window) / static_cast<double>(tc.grad_accum);
        if (inject_nan && tc.inject_nan_in == "loss") loss = loss * std::numeric_limits<double>::quiet_NaN();
        // Only the last micro-batch's backward all-reduces (the others accumulate locally).
        if (grad_sync) grad_sync->before_backward(micro == tc.grad_accum - 1);
        loss.backward();
        step_loss += loss.item<double>();
      }
    }
    double comm_wait = 0;
    if (grad_sync) {
      // Time blocked on gradient communication after backward: all of it on the post-backward
      // path, only what backward did not hide when overlapped. On CUDA, NCCL's wait() only orders
      // streams, so synchronize to see the exposed time on the host clock.
      const auto t_wait = Clock::now();
      grad_sync->finish();
      if (device.is_cuda()) torch::cuda::synchronize();
      comm_wait = since(t_wait);
      sum.buckets_in_backward += grad_sync->stats().launched_in_backward;
      sum.buckets_synced += grad_sync->stats().buckets;
      step_loss = comm->sum(step_loss) / comm->world();
    }
    if (inject_nan && tc.inject_nan_in == "grad") {
      torch::NoGradGuard g;
      for (auto& [n, p] : params) {
        if (n.find("down_proj") != std::string::npos && p.grad().defined()) {
          p.grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
          break;
        }
      }
    }
    const double gnorm = clip_grad_norm(plist, tc.grad_clip);
    // A non-finite loss or gradient is never applied: skip the update (up to train.nan_skip_limit
    // in the whole run) or stop with the last good checkpoint named.
    std::string skipped;  // first bad parameter of a skipped step
    if (!std::isfinite(step_loss) || !std::isfinite(gnorm)) {
      std::string culprit = "none (the loss itself)";
      for (auto& [n, p] : params) {
        if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) {
          culprit = n;
          break;
        }
      }
      const std::string what = absl::StrFormat("step %d: non-finite %s (loss %g, grad norm %g), first bad parameter: %s",
                                               step + 1, std::isfinite(step_loss) ? "gradient" : "loss", step_loss,
                                               gnorm, culprit);
      if (nan_skipped >= tc.nan_skip_limit) {
        std::string last = "none yet";
        auto latest = latest_checkpoint(req.run_dir);
        if (latest.ok()) last = *latest;
        const std::string limit =
            tc.nan_skip_limit > 0
                ? absl::StrFormat(" (%d earlier steps skipped, train.nan_skip_limit is %d)", nan_skipped, tc.nan_skip_limit)
                : std::string();
        return absl::InternalError(absl::StrFormat(
            "%s; stopped without applying the step%s; last good checkpoint: %s (lower train.lr or check the data, "
            "then --resume)",
            what, limit, last));
      }
      ++nan_skipped;
      skipped = culprit;
      log_warn("%s; update skipped (%d of train.nan_skip_limit %d)", what, nan_skipped, tc.nan_skip_limit);
    } else {
      optim.step(lr);
    }
    interval_step_s += since(t_step);
    interval_comm_s += comm_wait;
    ++interval_steps;
    sum.step_s += since(t_step);
    sum.comm_wait_s += comm_wait;
    ++step;
    tokens += step_tokens;
    if (skipped.empty()) last_loss = step_loss;
    sum.losses.push_back(step_loss);

    if (step % tc.log_interval == 0 || step == tc.steps || !skipped.empty()) {
      const double dt = since(t_log);
      const double rate = dt > 0 ? static_cast<double>(tokens - tokens_at_log) / dt : 0;
      t_log = Clock::now();
      tokens_at_log = tokens;
      // The first interval includes warm-up (allocator, oneDNN primitives): keep it out of the median.
      if (step > tc.log_interval || step == tc.steps) rates.push_back(rate);
      const double mfu = peak.flops > 0 ? rate * flops_per_token / (peak.flops * req.world_size) : 0;
      if (rates.size() >= 5 && rate < tc.sentinel_fraction * median(rates) && !sentinel_warned) {
        log_warn("throughput sentinel: %.0f tok/s is below %.0f%% of this run's median %.0f tok/s "
                 "(another process on the machine? thermal throttling? a slow data path?)",
                 rate, 100 * tc.sentinel_fraction, median(rates));
        sentinel_warned = true;
      }
      Json m = {{"step", step}, {"tokens", tokens}, {"loss", step_loss}, {"lr", lr},
                {"grad_norm", gnorm}, {"tokens_per_s", rate}, {"mfu", mfu},
                {"elapsed_s", since(t_start)}};
      if (nan_skipped > 0) m["nan_skipped"] = nan_skipped;  // in the whole run so far
      if (!skipped.empty()) m["skipped"] = skipped;         // not applied: first non-finite parameter
      if (grad_sync) {
        // Per-step means over this log interval, rank 0's clock (ranks wait for the slowest).
        m["step_time_s"] = interval_step_s / interval_steps;
        m["comm_wait_s"] = interval_comm_s / interval_steps;
        m["comm_wait_share"] = interval_step_s > 0 ? interval_comm_s / interval_step_s : 0;
      }
      interval_step_s = interval_comm_s = 0;
      interval_steps = 0;
      if (tc.eval_interval > 0 && !val.empty() && (step % tc.eval_interval == 0 || step == tc.steps)) {
        auto v = evaluate();
        for (const auto& [lang, x] : v) m["val_loss"][lang] = x;
        sum.val_loss = v;
      }
      if (main_rank) {
        metrics << m.dump() << "\n";
        metrics.flush();
        if (!metrics) return stream_error(metrics_path);
        std::string extra = absl::StrFormat("loss %.4f lr %.2e gnorm %.2f %.0f tok/s MFU %s", step_loss, lr,
                                            gnorm, rate,
                                            mfu > 0 ? absl::StrFormat("%.1f%%", 100 * mfu) : std::string("n/a"));
        if (m.contains("comm_wait_share"))
          extra += absl::StrFormat(" comm-wait %.0f%%", 100 * m["comm_wait_share"].get<double>());
        if (m.contains("val_loss"))
          for (const auto& [lang, x] : m["val_loss"].items()) extra += absl::StrFormat(" val_%s %.4f", lang, x.get<double>());
        progress.update(static_cast<double>(step), extra);
      }
    }
    if (tc.checkpoint_interval > 0 && step % tc.checkpoint_interval == 0 && step != tc.steps) {
      LM_RETURN_IF_ERROR(checkpoint(last_loss));
    }
    if (step == tc.stop_at_step && step != tc.steps) {
      LM_RETURN_IF_ERROR(checkpoint(last_loss));
      log_info("stopped at step %d as asked (train.stop_at_step); continue with --resume", step);
      break;
    }
    // Ranks agree on stopping, so they checkpoint the same step and none waits on a dead peer.
    int sig = stop_signal();
    if (comm != nullptr) sig = static_cast<int>(comm->max(sig));
    if (sig != 0) {
      LM_RETURN_IF_ERROR(checkpoint(last_loss));
      sum.stop_signal = sig;
      log_warn("signal %d: stopped after step %d with a checkpoint; continue with --resume", sum.stop_signal, step);
      break;
    }
  }
  if (step == tc.steps && sum.stop_signal == 0) LM_RETURN_IF_ERROR(checkpoint(last_loss));
  sum.steps = step;
  sum.tokens = tokens;
  sum.seconds = since(t_start);
  sum.tokens_per_s = sum.seconds > 0 ? static_cast<double>((step - sum.start_step) * step_tokens) / sum.seconds : 0;
  // Every rank brings its own device: MFU is against world_size times one peak.
  sum.mfu = peak.flops > 0 ? sum.tokens_per_s * flops_per_token / (peak.flops * req.world_size) : 0;
  sum.final_loss = last_loss;
  sum.nan_skipped = nan_skipped;
  return sum;
}

}  // namespace lm::train
