// Training-step throughput of lmtrain fit's loop on synthetic tokens (no data pipeline), for a
// preset, batch, sequence length and dtype: prints one JSON line with tokens/s and MFU.
// bench/run.sh runs it alternately with the Python PyTorch peer (bench/peer_pytorch.py).
//
// Modes: train (lm::train::fit, the real loop: forward, backward, clip, AdamW), forward (the
// model's loss under NoGrad), nll (`lmeval nll`'s own path: its windows and batched scorer,
// per-token log-probs on the host; issue 21 asks evaluation to be as fast as training per token),
// peak (the CPU matmul ceiling, fp32 and bf16), config (preset shapes and counts, for
// check_peer_presets.sh), kernels (lmforge's own CUDA kernels against their references at the
// preset's shapes, --steps timed repetitions each; bench/kernel_timing.h).
#include <CLI/CLI.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unordered_map>
#include <random>

#include <torch/csrc/autograd/profiler_legacy.h>

#include "absl/strings/str_join.h"
#include "bench/kernel_timing.h"
#include "core/file.h"
#include "core/config.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "eval/model_scorer.h"
#include "eval/nll.h"
#include "runtime/runtime.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/verify.h"
#include "train/device.h"
#include "train/trainer.h"

namespace {
// The failure the tests plant (scripts/gpu-check.sh's LM_GPU_CHECK_PLANT passes it on as
// LM_BENCH_PLANT; tests/app/bench_contract.sh sets it): "throw" (a c10::Error from inside fit, as an
// OOM or a cuBLAS error would be), "crash" (SIGSEGV right after the JSON line). Empty in real runs.
std::string planted_failure() {
  const char* p = std::getenv("LM_BENCH_PLANT");
  return p != nullptr ? p : "";
}

class RandomSource : public lm::train::BatchSource {
 public:
  RandomSource(int64_t n, int32_t vocab) : n_(n), vocab_(vocab) {}
  void next(std::vector<int32_t>* out) override {
    TORCH_CHECK(!(throw_at_ > 0 && ++calls_ == throw_at_), "planted failure (LM_BENCH_PLANT=throw) at batch ", throw_at_);
    out->resize(n_);
    for (auto& t : *out) t = static_cast<int32_t>(rng_() % vocab_);
  }
  lm::Json cursor() const override { return lm::Json::object(); }
  absl::Status restore(const lm::Json&) override { return absl::OkStatus(); }
  void throw_at(int64_t call) { throw_at_ = call; }

 private:
  int64_t throw_at_ = 0, calls_ = 0;
  int64_t n_;
  int32_t vocab_;
  std::mt19937_64 rng_{42};
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

// The timed window, the same on both sides (bench/peer_pytorch.py takes the same three flags):
// `warmup` untimed steps, then `steps` timed ones; the host reads the step results every
// `read_every` steps (lmforge: train.logging.interval; the peer: loss.item() on those steps only),
// and the rate runs from the read at step `warmup` to the read at step warmup + steps.
struct Window {
  int64_t warmup = 5, steps = 40, read_every = 5;
  int64_t total() const { return warmup + steps; }
};

// Steady-state rate of the window from metrics.jsonl: tokens and elapsed time between the lines of
// steps `warmup` and `warmup + steps` (0 when either is missing: the run stopped before).
double window_rate(const std::string& metrics_path, const Window& w) {
  double t0 = -1, t1 = -1, n0 = 0, n1 = 0;
  auto rows = lm::read_metrics(metrics_path);
  if (!rows.ok()) return 0;
  for (const auto& j : *rows) {
    const int64_t step = j.value("step", int64_t{0});
    if (step == w.warmup) { t0 = j["elapsed_s"].get<double>(); n0 = j["tokens"].get<double>(); }
    if (step == w.total()) { t1 = j["elapsed_s"].get<double>(); n1 = j["tokens"].get<double>(); }
  }
  return t0 >= 0 && t1 > t0 ? (n1 - n0) / (t1 - t0) : 0;
}
// Records every ATen op with its input shapes (the legacy CPU profiler, as Python's
// torch.autograd.profiler does on this build, which has no Kineto) and writes complete events
// as a chrome trace: bench/profile_summary.py aggregates self time by op and shape.
class ShapeProfile {
 public:
  explicit ShapeProfile(std::string path)
      : path_(std::move(path)),
        guard_(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                     /*report_input_shapes=*/true),
               [this](const torch::autograd::profiler::thread_event_lists& lists) { write(lists); }) {}

 private:
  void write(const torch::autograd::profiler::thread_event_lists& lists) {
    using torch::autograd::profiler::EventKind;
    lm::Json out = lm::Json::array();
    for (const auto& list : lists) {
      std::unordered_map<uint64_t, const torch::autograd::profiler::LegacyEvent*> open;
      for (const auto& e : list) {
        if (e.kind() == EventKind::PushRange) {
          open[e.handle()] = &e;
        } else if (e.kind() == EventKind::PopRange) {
          auto it = open.find(e.handle());
          if (it == open.end()) continue;
          const auto* b = it->second;
          out.push_back({{"ph", "X"}, {"name", b->name()}, {"ts", b->cpuUs()},
                         {"dur", b->cpuElapsedUs(e)}, {"tid", b->threadId()},
                         {"args", {{"shapes", b->shapes()}}}});
          open.erase(it);
        }
      }
    }
    std::ofstream(path_) << out.dump();
  }
  std::string path_;
  torch::autograd::profiler::TLSLegacyProfilerGuard guard_;
};
// `lmeval nll`'s path on random tokens: non-overlapping windows of `seq` inputs scored `batch` at a
// time by the model scorer (bf16 weights when asked, as lmeval does on CUDA). One untimed batch
// first (allocations); returns scored tokens per second and the mean NLL.
std::pair<double, double> nll_rate(const lm::model::ModelConfig& mc, int64_t batch, int64_t seq, int64_t steps,
                                   bool bf16) {
  torch::manual_seed(1234);
  lm::model::Transformer model(mc);
  model->eval();
  if (bf16) model->to(torch::kBFloat16);
  RandomSource src((steps + 1) * batch * seq + 1, static_cast<int32_t>(mc.vocab_size));
  std::vector<int32_t> stream;
  src.next(&stream);
  auto windows = lm::eval::make_windows(stream, seq, 0);
  lm::eval::ScorerOptions opts;
  opts.batch_size = batch;
  opts.bf16 = bf16;
  auto scorer = lm::eval::make_model_scorer(model, opts);
  std::vector<lm::eval::Window> warm(windows.begin(), windows.begin() + batch);
  (void)lm::eval::score_windows(warm, scorer);
  std::vector<lm::eval::Window> timed(windows.begin() + batch, windows.end());
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = lm::eval::score_windows(timed, scorer);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!stats.ok()) return {0, 0};
  return {stats->tokens / s, stats->nats_per_token()};
}
// Train mode's switches (train.hardware.*) and what the checks may do.
struct TrainOptions {
  bool cuda_kernels = false, cuda_graphs = false, recompute = false;
  std::string sdpa_backend = "auto";
  std::vector<std::string> paths_off;
  int64_t inject_nan_step = -1, nan_skip_limit = -1;
  std::string break_fast_path;
};

// lmtrain fit's request for the bench: the preset's own training row (its lr and schedule, not a
// bench's), one micro-batch per step, the window's steps and read cadence, the start-up
// verification ON (a fast path this stage times is checked against its reference first), no
// validation and no checkpoint at all (a 400m one is 4.7 GB with fsync), some non-finite steps
// skipped rather than fatal (a quarter of the steps: the figure is still the step's speed).
lm::train::FitRequest bench_request(const std::string& preset, const lm::model::ModelConfig& mc, int64_t batch,
                                    int64_t seq, const Window& w, const std::string& dtype, const std::string& device,
                                    const TrainOptions& o, int threads) {
  lm::train::FitRequest req;
  req.model = mc;
  req.run_dir = (std::filesystem::temp_directory_path() / ("lm_bench_" + std::to_string(getpid()))).string();
  req.force = true;
  req.train = lm::train::preset_train_config(preset);
  auto& t = req.train;
  t.tokens = 0; t.steps = w.total(); t.stop_at_step = -1;
  t.batch.micro_batch = batch; t.batch.seq_len = seq; t.batch.grad_accum = 1; t.batch.batch_tokens = 0;
  t.logging.interval = w.read_every; t.eval.interval = 0; t.eval.sample_tokens = 0;
  // The throughput floor off: below it the trainer synchronises one step phase by phase, inside
  // the timed window (eager stages only: graph replays skip it), which is what a bench measures.
  t.logging.mfu_floor = 0;
  t.checkpoint.interval = 0; t.checkpoint.minutes = 0; t.checkpoint.at_end = false;
  t.debug.verify_at_start = true;
  t.nan_skip_limit = o.nan_skip_limit >= 0 ? o.nan_skip_limit : std::max<int64_t>(1, w.total() / 4);
  t.debug.inject_nan_step = o.inject_nan_step;
  t.hardware.dtype = dtype; t.hardware.device = device; t.hardware.threads = threads;
  t.hardware.cuda_kernels = o.cuda_kernels;
  t.hardware.cuda_graphs = o.cuda_graphs;
  t.hardware.recompute = o.recompute;
  t.hardware.sdpa_backend = o.sdpa_backend;
  t.hardware.fast_paths_off = o.paths_off;
  return req;
}

// Train mode: fit on random tokens; prints its JSON line (flushed) whatever the outcome, with the
// exit code and the error when fit failed, before anything else can go wrong (the run folder's
// removal crashed once on a GPU machine and took a good figure with it). What ran is recorded, not
// what was asked: the fast paths verified and fallen back, whether a CUDA graph was captured.
int train_mode(const std::string& preset, const lm::model::ModelConfig& mc, int64_t batch, int64_t seq,
               const Window& w, const std::string& dtype, const std::string& device, const TrainOptions& o,
               int threads) {
  lm::train::FitRequest req = bench_request(preset, mc, batch, seq, w, dtype, device, o, threads);
  if (!o.break_fast_path.empty()) lm::model::set_debug_break_fast_path(o.break_fast_path);
  RandomSource src(batch * (seq + 1), static_cast<int32_t>(mc.vocab_size));
  if (planted_failure() == "throw") src.throw_at(3);
  // fit has no catch of its own: a c10::Error (an OOM, a cuBLAS/cuDNN error, a failed device check,
  // a graph-capture error) would reach std::terminate before the JSON line. Caught, it is the line's
  // "error" and the exit code is non-zero.
  absl::StatusOr<lm::train::FitSummary> sum = absl::UnknownError("fit did not return");
  try {
    sum = lm::train::fit(req, src, {});
  } catch (const c10::Error& e) {
    sum = absl::InternalError(std::string("c10::Error: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    sum = absl::InternalError(std::string("exception: ") + e.what());
  }
  const double rate = window_rate(lm::RunFolder(req.run_dir).metrics(), w);
  const double fpt = lm::model::train_flops_per_token(mc, seq);
  lm::Json j = {{"impl", "lmforge"}, {"preset", preset}, {"dtype", dtype}, {"mode", "train"}, {"device", device},
                {"batch", batch}, {"seq", seq}, {"warmup", w.warmup}, {"steps", w.steps}, {"read_every", w.read_every},
                {"threads", threads}, {"tokens_per_s", rate}, {"flops_per_token", fpt},
                {"params", lm::model::param_count(mc)}, {"peak_rss_mb", peak_rss_mb()},
                {"lr", req.train.optimizer.lr}, {"lr_warmup", req.train.schedule.warmup_steps},
                {"cuda_kernels", o.cuda_kernels}, {"cuda_graphs", o.cuda_graphs}, {"recompute", o.recompute}, {"sdpa_backend", o.sdpa_backend},
                {"fast_paths_off", absl::StrJoin(o.paths_off, ",")}, {"verify_at_start", req.train.debug.verify_at_start},
                {"mfu_floor", req.train.logging.mfu_floor}, {"exit_code", sum.ok() ? 0 : 1}};
  if (sum.ok()) {
    const auto& f = *sum;
    j["final_loss"] = f.final_loss;
    j["first_loss"] = f.losses.empty() ? 0 : f.losses.front();
    j["host_reads"] = f.host_reads;
    j["nan_skipped"] = f.nan_skipped;
    j["fast_paths_verified"] = f.fast_paths_verified;
    j["fast_path_fallback"] = absl::StrJoin(f.fast_path_fallback, ",");
    j["graph_captured"] = f.cuda_graph_captured;
    // The device's peak allocation against what `lmtrain plan` counts for this step (issue 39:
    // within 10% for the 400m and 1b steps); 0 on a CPU.
    j["peak_allocated_bytes"] = f.peak_device_bytes;
    j["plan_total_bytes"] = f.plan_device_bytes;
    j["peak_vs_plan"] = f.plan_device_bytes > 0 ? f.peak_device_bytes / f.plan_device_bytes : 0.0;
    // Another one when the asked one failed here (train.hardware.sdpa_backend applies on CUDA only).
    if (device.rfind("cuda", 0) == 0) j["sdpa_backend_used"] = lm::model::sdpa_backend_in_use();
    j["floor_fired"] = !f.floor_warning.empty();
    j["peak_flops"] = f.peak_flops;
    j["peak_source"] = f.peak_source;
    j["measured_peak_flops"] = f.measured_peak_flops;
    j["measured_peak"] = f.measured_peak;
    if (!f.peak_warning.empty()) j["peak_warning"] = f.peak_warning;
    // MFU of the window's rate, by both names (train/device.h).
    j["mfu"] = f.peak_flops > 0 ? rate * fpt / f.peak_flops : 0.0;
    j["mfu_measured_peak"] = f.measured_peak_flops > 0 ? rate * fpt / f.measured_peak_flops : 0.0;
  } else {
    j["error"] = std::string(sum.status().message());
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  if (planted_failure() == "crash") std::raise(SIGSEGV);  // a crash on the way out, after the line
  (void)lm::remove_tree(req.run_dir);
  return sum.ok() ? 0 : 1;
}

// Peak mode: the matmul ceiling of the device, timed >= 1 s as the best of 5 windows, with the
// data sheet's figure beside it on a GPU and the judgement of whether the ceiling can be believed.
int peak_mode(const std::string& device, int64_t n, int threads) {
  const torch::Device dev(device);
  lm::Json j = {{"impl", "lmforge"}, {"mode", "peak"}, {"device", device}, {"threads", threads}};
  for (const auto dt : {torch::kFloat32, torch::kBFloat16}) {
    const std::string name = dt == torch::kBFloat16 ? "bf16" : "fp32";
    if (dev.is_cuda() && dt == torch::kFloat32) continue;  // the step runs bf16 on a GPU
    const lm::train::DevicePeak p = lm::train::device_peak(dev, dt, 0, 1.0, n);
    j["n"] = n > 0 ? n : (dev.is_cuda() ? 8192 : 1024);
    j[name + "_flops"] = p.measured;
    j[name + "_how"] = p.measured_how;
    j[name + "_spec_flops"] = p.flops;
    j[name + "_spec_source"] = p.source;
    j[name + "_judgement"] = p.warning.empty() ? "plausible" : p.warning;
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return 0;
}
}  // namespace

int bench_main(int argc, char** argv) {
  CLI::App app{"train-step throughput on synthetic tokens"};
  std::string preset = "small", dtype = "fp32", device = "cpu", mode = "train";
  int64_t batch = 8, seq = 256, steps = 40, vocab = 0, n_layers = 0, n_heads = 0, peak_n = 0;
  int threads = 0;
  Window window;
  app.add_option("--mode", mode, "train | forward | nll | peak | config | kernels");
  app.add_option("--preset", preset);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps, "train mode: timed steps after --warmup; other modes: all steps");
  app.add_option("--warmup", window.warmup, "train mode: untimed steps before the timed ones (a multiple of --read-every)");
  app.add_option("--read-every", window.read_every,
                 "train mode: the host reads the step results every N steps (train.logging.interval); the rate runs "
                 "from the read at step --warmup to the one at --warmup + --steps");
  app.add_option("--vocab", vocab);
  app.add_option("--n-layers", n_layers, "override the preset's layer count");
  app.add_option("--n-heads", n_heads, "override the preset's heads (and kv heads)");
  app.add_option("--dtype", dtype);
  app.add_option("--device", device);
  app.add_option("--threads", threads);
  app.add_option("--peak-n", peak_n, "matmul size of --mode peak (default 8192 on cuda, 1024 on cpu)");
  TrainOptions opts;
  auto& paths_off = opts.paths_off;
  app.add_option("--sdpa-backend", opts.sdpa_backend, "train mode: auto | flash | cudnn | efficient | math (train.hardware.sdpa_backend)");
  app.add_flag("--cuda-kernels", opts.cuda_kernels, "train mode: lmforge's own CUDA kernels on (train.hardware.cuda_kernels)");
  app.add_flag("--cuda-graphs", opts.cuda_graphs, "train mode: the step captured and replayed as a CUDA graph (train.hardware.cuda_graphs)");
  app.add_flag("--recompute", opts.recompute, "train mode: activation recompute per block (train.hardware.recompute)");
  app.add_option("--nan-skip-limit", opts.nan_skip_limit, "train mode: train.nan_skip_limit (default: a quarter of the steps)");
  app.add_option("--inject-nan-step", opts.inject_nan_step, "train mode, tests: a non-finite gradient at this step (train.debug)");
  app.add_option("--break-fast-path", opts.break_fast_path,
                 "train mode, tests: plant a 5% error in this fast path (the start-up check must catch it)");
  app.add_option("--fast-paths-off", paths_off,
                 "train and forward modes: these fast paths on their reference (train.hardware.fast_paths_off), "
                 "e.g. rms_norm.cpu,add_rms_norm.cpu,swiglu.cpu,rope.cpu,attention.cpu,cross_entropy.cpu for the CPU kernels' A/B")
      ->delimiter(',');
  std::string profile;
  app.add_option("--profile", profile,
                 "write a chrome trace of the whole run (legacy autograd profiler); "
                 "bench/profile_summary.py aggregates it by op and shape");
  CLI11_PARSE(app, argc, argv);
  lm::init_output(true);
  const int nthreads = lm::setup_threads(threads);
  if (mode == "peak") return peak_mode(device, peak_n, nthreads);
  window.steps = steps;
  if (mode == "train" && (window.read_every < 1 || window.warmup < window.read_every || window.steps < window.read_every ||
                          window.warmup % window.read_every != 0 || window.steps % window.read_every != 0)) {
    std::fprintf(stderr, "train_step_bench: --warmup %ld and --steps %ld must be positive multiples of --read-every %ld\n",
                 window.warmup, window.steps, window.read_every);
    return 2;
  }
  auto cfg = lm::model::preset(preset);
  if (!cfg.ok()) return 2;
  lm::model::ModelConfig mc = *cfg;
  if (vocab > 0) mc.vocab_size = vocab;
  if (n_layers > 0) mc.n_layers = n_layers;
  if (n_heads > 0) mc.n_heads = mc.n_kv_heads = n_heads;
  mc.max_seq_len = std::max(mc.max_seq_len, seq);
  const double fpt = lm::model::train_flops_per_token(mc, seq);
  const int64_t params = lm::model::param_count(mc);
  if (mode == "kernels") {
    const auto dt = dtype == "bf16" ? torch::kBFloat16 : dtype == "fp16" ? torch::kFloat16 : torch::kFloat32;
    std::printf("%s\n", lm::bench::time_own_kernels(mc, batch, seq, torch::Device(device), dt,
                                                    static_cast<int>(std::max<int64_t>(steps, 1))).dump().c_str());
    return 0;
  }
  if (mode == "config") {
    lm::Json j = lm::to_json(mc);
    j["params"] = params;
    j["flops_per_token"] = fpt;
    const auto row = lm::train::preset_train_config(preset);  // the peer trains with the same lr
    j["lr"] = row.optimizer.lr;
    j["lr_warmup"] = row.schedule.warmup_steps;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  double rate = 0, final_loss = 0, first_loss = 0;
  std::unique_ptr<ShapeProfile> prof;
  if (!profile.empty()) prof = std::make_unique<ShapeProfile>(profile);
  if (mode == "nll") {
    std::tie(rate, final_loss) = nll_rate(mc, batch, seq, steps, dtype == "bf16");
    first_loss = final_loss;
  } else if (mode == "forward") {
    torch::manual_seed(1234);
    lm::model::Transformer model(mc);
    model->eval();
    for (const auto& fp : lm::model::fast_paths())
      if (std::find(paths_off.begin(), paths_off.end(), fp.name) != paths_off.end()) fp.fall_back(model);
    torch::NoGradGuard no_grad;
    RandomSource src(batch * (seq + 1), static_cast<int32_t>(mc.vocab_size));
    std::vector<int32_t> flat;
    const int64_t every = std::max<int64_t>(1, steps / 4);
    std::vector<std::pair<double, double>> marks;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      src.next(&flat);
      auto w = torch::from_blob(flat.data(), {batch, seq + 1}, torch::kInt32).to(torch::kInt64);
      lm::train::AutocastGuard ac(torch::kCPU, dtype == "bf16");
      const double loss = model->loss(w).item<double>();
      if (s == 0) first_loss = loss;
      final_loss = loss;
      if ((s + 1) % every == 0 || s + 1 == steps)
        marks.emplace_back(static_cast<double>((s + 1) * batch * seq),
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    rate = marks.size() >= 2 ? (marks.back().first - marks.front().first) / (marks.back().second - marks.front().second)
                             : marks.back().first / marks.back().second;
  } else {
    const int rc = train_mode(preset, mc, batch, seq, window, dtype, device, opts, nthreads);
    prof.reset();
    return rc;
  }
  prof.reset();  // writes the trace
  std::printf("{\"impl\": \"lmforge\", \"preset\": \"%s\", \"dtype\": \"%s\", \"mode\": \"%s\", \"batch\": %ld, "
              "\"seq\": %ld, \"steps\": %ld, \"threads\": %d, \"tokens_per_s\": %.1f, \"flops_per_token\": %.6g, "
              "\"params\": %ld, \"peak_rss_mb\": %.1f, \"final_loss\": %.4f, \"first_loss\": %.4f, "
              "\"fast_paths_off\": \"%s\"}\n",
              preset.c_str(), dtype.c_str(), mode.c_str(), batch, seq, steps, nthreads, rate, fpt, params,
              peak_rss_mb(), final_loss, first_loss, absl::StrJoin(paths_off, ",").c_str());
  return 0;
}

// Whatever mode throws, the line is still printed (train mode catches around fit itself, with its
// figures; this is the last resort of the others).
int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    lm::Json j = {{"impl", "lmforge"}, {"exit_code", 1},
                  {"error", c10 != nullptr ? c10->what_without_backtrace() : e.what()}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    return 1;
  }
}
