// Training-step throughput of lmtrain fit's loop on synthetic tokens (no data pipeline), for a
// preset, batch, sequence length and dtype: prints one JSON line with tokens/s and MFU.
// bench/run.sh runs it alternately with the Python PyTorch peer (bench/peer_pytorch.py).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <random>

#include "core/log.h"
#include "core/runtime.h"
#include "model/config.h"
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
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train-step throughput on synthetic tokens"};
  std::string preset = "small", dtype = "fp32", device = "cpu";
  int64_t batch = 8, seq = 256, steps = 20, vocab = 0;
  int threads = 0;
  app.add_option("--preset", preset);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps);
  app.add_option("--vocab", vocab);
  app.add_option("--dtype", dtype);
  app.add_option("--device", device);
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);
  lm::init_output(true);
  lm::setup_threads(threads);
  lm::train::FitRequest req;
  auto cfg = lm::model::preset(preset);
  if (!cfg.ok()) return 2;
  req.model = *cfg;
  if (vocab > 0) req.model.vocab_size = vocab;
  req.model.max_seq_len = std::max(req.model.max_seq_len, seq);
  req.run_dir = (std::filesystem::temp_directory_path() / ("lm_bench_" + std::to_string(getpid()))).string();
  req.force = true;
  auto& t = req.train;
  t.steps = steps; t.micro_batch = batch; t.seq_len = seq; t.dtype = dtype; t.device = device;
  t.log_interval = std::max<int64_t>(1, steps / 4); t.eval_interval = 0; t.checkpoint_interval = 0;
  t.verify_at_start = false; t.warmup_steps = 2;
  RandomSource src(batch * (seq + 1), static_cast<int32_t>(req.model.vocab_size));
  auto sum = lm::train::fit(req, src, {});
  std::filesystem::remove_all(req.run_dir);
  if (!sum.ok()) { std::fprintf(stderr, "error: %s\n", std::string(sum.status().message()).c_str()); return 1; }
  std::printf("{\"impl\": \"lmforge\", \"preset\": \"%s\", \"dtype\": \"%s\", \"batch\": %ld, \"seq\": %ld, "
              "\"steps\": %ld, \"tokens_per_s\": %.1f, \"mfu\": %.4f, \"peak\": \"%s\", \"final_loss\": %.4f}\n",
              preset.c_str(), dtype.c_str(), batch, seq, steps, sum->tokens_per_s, sum->mfu,
              sum->peak_source.c_str(), sum->final_loss);
  return 0;
}
