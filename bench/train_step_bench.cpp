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
#include <cstdio>
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
class RandomSource : public lm::train::BatchSource {
 public:
  RandomSource(int64_t n, int32_t vocab) : n_(n), vocab_(vocab) {}
  void next(std::vector<int32_t>* out) override {
    out->resize(n_);
    for (auto& t : *out) t = static_cast<int32_t>(rng_() % vocab_);
  }
  lm::Json cursor() const override { return lm::Json::object(); }
  absl::Status restore(const lm::Json&) override { return absl::OkStatus(); }

 private:
  int64_t n_;
  int32_t vocab_;
  std::mt19937_64 rng_{42};
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

// Steady-state rate from metrics.jsonl: first log point (warm-up excluded) to the last one,
// the same definition the peer uses. The final checkpoint write is after the last log point.
double steady_rate(const std::string& metrics_path) {
  std::vector<std::pair<double, double>> marks;  // tokens, elapsed_s
  auto rows = lm::read_metrics(metrics_path);
  if (rows.ok())
    for (const auto& j : *rows) marks.emplace_back(j["tokens"].get<double>(), j["elapsed_s"].get<double>());
  if (marks.size() < 2) return marks.empty() ? 0 : marks.back().first / marks.back().second;
  return (marks.back().first - marks.front().first) / (marks.back().second - marks.front().second);
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
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train-step throughput on synthetic tokens"};
  std::string preset = "small", dtype = "fp32", device = "cpu", mode = "train";
  int64_t batch = 8, seq = 256, steps = 20, vocab = 0, n_layers = 0, n_heads = 0, peak_n = 2048;
  int threads = 0;
  app.add_option("--mode", mode, "train | forward | nll | peak | config | kernels");
  app.add_option("--preset", preset);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps);
  app.add_option("--vocab", vocab);
  app.add_option("--n-layers", n_layers, "override the preset's layer count");
  app.add_option("--n-heads", n_heads, "override the preset's heads (and kv heads)");
  app.add_option("--dtype", dtype);
  app.add_option("--device", device);
  app.add_option("--threads", threads);
  app.add_option("--peak-n", peak_n, "matmul size of --mode peak");
  bool cuda_kernels = false, cuda_graphs = false;
  std::string sdpa_backend = "auto";
  app.add_option("--sdpa-backend", sdpa_backend, "train mode: auto | flash | cudnn | efficient | math (train.hardware.sdpa_backend)");
  app.add_flag("--cuda-kernels", cuda_kernels, "train mode: lmforge's own CUDA kernels on (train.hardware.cuda_kernels)");
  app.add_flag("--cuda-graphs", cuda_graphs, "train mode: the step captured and replayed as a CUDA graph (train.hardware.cuda_graphs)");
  std::vector<std::string> paths_off;
  app.add_option("--fast-paths-off", paths_off,
                 "train and forward modes: these fast paths on their reference (train.hardware.fast_paths_off), "
                 "e.g. rms_norm.cpu,add_rms_norm.cpu,swiglu.cpu,rope.cpu,cross_entropy.cpu for the CPU kernels' A/B")
      ->delimiter(',');
  std::string profile;
  app.add_option("--profile", profile,
                 "write a chrome trace of the whole run (legacy autograd profiler); "
                 "bench/profile_summary.py aggregates it by op and shape");
  CLI11_PARSE(app, argc, argv);
  lm::init_output(true);
  const int nthreads = lm::setup_threads(threads);
  if (mode == "peak") {
    const torch::Device cpu(torch::kCPU);
    const double f32 = lm::train::measure_matmul_peak(cpu, torch::kFloat32, peak_n, 1.5).best;
    const double b16 = lm::train::measure_matmul_peak(cpu, torch::kBFloat16, peak_n, 1.5).best;
    std::printf("{\"impl\": \"lmforge\", \"mode\": \"peak\", \"n\": %ld, \"threads\": %d, "
                "\"fp32_flops\": %.4g, \"bf16_flops\": %.4g}\n", peak_n, nthreads, f32, b16);
    return 0;
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
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  double rate = 0, final_loss = 0, first_loss = 0;
  std::string fell_back;  // fast paths the start-up check switched to their reference
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
    lm::train::FitRequest req;
    req.model = mc;
    req.run_dir = (std::filesystem::temp_directory_path() / ("lm_bench_" + std::to_string(getpid()))).string();
    req.force = true;
    auto& t = req.train;
    t.steps = steps; t.batch.micro_batch = batch; t.batch.seq_len = seq; t.hardware.dtype = dtype; t.hardware.device = device;
    t.logging.interval = std::max<int64_t>(1, steps / 4); t.eval.interval = 0; t.checkpoint.interval = 0;
    t.debug.verify_at_start = false; t.schedule.warmup_steps = 2; t.hardware.threads = nthreads;
    t.hardware.cuda_kernels = cuda_kernels;
    t.hardware.cuda_graphs = cuda_graphs;
    t.hardware.sdpa_backend = sdpa_backend;
    t.hardware.fast_paths_off = paths_off;
    RandomSource src(batch * (seq + 1), static_cast<int32_t>(mc.vocab_size));
    auto sum = lm::train::fit(req, src, {});
    rate = steady_rate(lm::RunFolder(req.run_dir).metrics());
    (void)lm::remove_tree(req.run_dir);
    if (!sum.ok()) { std::fprintf(stderr, "error: %s\n", std::string(sum.status().message()).c_str()); return 1; }
    final_loss = sum->final_loss;
    first_loss = sum->losses.empty() ? 0 : sum->losses.front();
    fell_back = absl::StrJoin(sum->fast_path_fallback, ",");
  }
  prof.reset();  // writes the trace
  std::printf("{\"impl\": \"lmforge\", \"preset\": \"%s\", \"dtype\": \"%s\", \"mode\": \"%s\", \"batch\": %ld, "
              "\"seq\": %ld, \"steps\": %ld, \"threads\": %d, \"tokens_per_s\": %.1f, \"flops_per_token\": %.6g, "
              "\"params\": %ld, \"peak_rss_mb\": %.1f, \"final_loss\": %.4f, \"first_loss\": %.4f, "
              "\"cuda_kernels\": %s, \"cuda_graphs\": %s, \"sdpa_backend\": \"%s\", \"fast_path_fallback\": \"%s\", "
              "\"fast_paths_off\": \"%s\"}\n",
              preset.c_str(), dtype.c_str(), mode.c_str(), batch, seq, steps, nthreads, rate, fpt, params,
              peak_rss_mb(), final_loss, first_loss, cuda_kernels ? "true" : "false", cuda_graphs ? "true" : "false", sdpa_backend.c_str(),
              fell_back.c_str(), absl::StrJoin(paths_off, ",").c_str());
  return 0;
}
