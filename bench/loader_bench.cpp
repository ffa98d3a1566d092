// Data loader throughput: batches per second of BatchSampler against the training step time of
// a preset (forward + backward of the model on the same [B, T] batch; no optimizer, so the ratio
// printed is an upper bound on the loader's share). Target: loader under 1% of the step.
//
//   loader_bench [--data shards/] [--tokens 20e6] [--batch 8] [--seq 256] [--batches 2000]
//                [--preset small] [--steps 3] [--threads 0]
// Without --data it writes synthetic shards (two languages, random document lengths) to a
// temp folder. Prints a table and one JSON line.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "core/file.h"
#include "core/config.h"
#include "runtime/runtime.h"
#include "data/sampler.h"
#include "model/config.h"
#include "model/transformer.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

absl::Status write_synthetic(const std::string& dir, uint64_t tokens, uint32_t vocab) {
  lm::data::ShardManifest m;
  m.tokenizer_hash = "bench";
  m.vocab_size = static_cast<int32_t>(vocab);
  m.weights = {{"bn", 0.7}, {"en", 0.3}};
  std::mt19937_64 rng(1);
  for (const char* lang : {"bn", "en"}) {
    for (int s = 0; s < 4; ++s) {
      lm::data::ShardWriter w(vocab, "bench");
      std::vector<int32_t> doc;
      while (w.n_tokens() < tokens / 8) {
        doc.resize(50 + rng() % 2000);
        for (auto& t : doc) t = static_cast<int32_t>(rng() % vocab);
        LM_RETURN_IF_ERROR(w.add_document(doc));
      }
      const std::string name = std::string(lang) + ".train." + std::to_string(s) + ".lmtok";
      m.shards.push_back({name, lang, "train", w.n_tokens(), w.n_docs()});
      LM_RETURN_IF_ERROR(w.write(dir + "/" + name));
    }
  }
  return lm::data::write_manifest(dir, m);
}

// Seconds per batch of `n` next() calls.
double time_sampler(lm::data::BatchSampler s, int64_t n, uint64_t* checksum) {
  std::vector<int32_t> b;
  s.next(&b);  // warm-up
  const auto t = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    s.next(&b);
    *checksum += static_cast<uint64_t>(b[i % b.size()]);
  }
  return since(t) / n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"data loader throughput vs training step time"};
  std::string data, preset = "small";
  double tokens = 20e6;
  int64_t batch = 8, seq = 256, batches = 2000, steps = 3;
  int threads = 0;
  app.add_option("--data", data, "shards folder (default: synthetic shards in a temp folder)");
  app.add_option("--tokens", tokens, "synthetic tokens to write")->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--batches", batches, "sampler batches to time")->capture_default_str();
  app.add_option("--preset", preset, "model whose step time the loader is compared to")->capture_default_str();
  app.add_option("--steps", steps, "timed training steps (0 = skip)")->capture_default_str();
  app.add_option("--threads", threads, "torch threads (0 = all cores)");
  CLI11_PARSE(app, argc, argv);
  const int n_threads = lm::setup_threads(threads);

  auto cfg = lm::model::preset(preset);
  if (!cfg.ok()) return lm::report_error(cfg.status());
  std::string dir = data;
  fs::path tmp;
  if (dir.empty()) {
    tmp = fs::temp_directory_path() / ("lm_loader_bench." + std::to_string(::getpid()));
    fs::create_directories(tmp);
    dir = tmp.string();
    const auto t = Clock::now();
    if (auto st = write_synthetic(dir, static_cast<uint64_t>(tokens), static_cast<uint32_t>(cfg->vocab_size)); !st.ok())
      return lm::report_error(st);
    std::printf("wrote %.0fM synthetic tokens in %.2f s\n", tokens / 1e6, since(t));
  }
  auto t_open = Clock::now();
  auto set = lm::data::ShardSet::open(dir, /*verify_checksum=*/true);
  if (!set.ok()) return lm::report_error(set.status());
  const double open_s = since(t_open);
  uint64_t total = 0;
  for (const auto& r : set->all_readers()) total += r.size();

  lm::data::SamplerConfig sc;
  sc.batch = batch;
  sc.seq_len = seq;
  auto s = lm::data::BatchSampler::create(*set, sc);
  if (!s.ok()) return lm::report_error(s.status());
  sc.doc_aligned = true;
  auto sa = lm::data::BatchSampler::create(*set, sc);
  if (!sa.ok()) return lm::report_error(sa.status());
  uint64_t checksum = 0;
  const double per_batch = time_sampler(*s, batches, &checksum);
  const double per_batch_aligned = time_sampler(*sa, batches, &checksum);

  double step_s = 0;
  if (steps > 0) {
    lm::model::ModelConfig mc = *cfg;
    mc.max_seq_len = std::max<int64_t>(mc.max_seq_len, seq);
    lm::model::Transformer model(mc);
    auto x = torch::randint(mc.vocab_size, {batch, seq + 1}, torch::kLong);
    auto step = [&] {
      auto logits = model->forward(x.narrow(1, 0, seq));
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, mc.vocab_size}),
                                                       x.narrow(1, 1, seq).reshape({-1}));
      loss.backward();
      model->zero_grad();
    };
    step();  // warm-up
    const auto t = Clock::now();
    for (int64_t i = 0; i < steps; ++i) step();
    step_s = since(t) / steps;
  }
  const double share = step_s > 0 ? per_batch / step_s : 0;
  std::printf("shards: %s, %.1fM tokens, open + verify %.3f s (%.0f MB/s)\n", dir.c_str(), total / 1e6, open_s,
              total * 2 / 1e6 / std::max(open_s, 1e-9));
  std::printf("sampler [%ld x %ld]: %8.1f us/batch  %9.0f batches/s  %6.1f Mtok/s\n", batch, seq + 1,
              per_batch * 1e6, 1 / per_batch, batch * (seq + 1) / per_batch / 1e6);
  std::printf("  doc-aligned:     %8.1f us/batch  %9.0f batches/s\n", per_batch_aligned * 1e6, 1 / per_batch_aligned);
  if (step_s > 0) {
    std::printf("%s step (fwd+bwd, %d threads): %.1f ms -> loader %.4f%% of the step (target < 1%%)\n",
                preset.c_str(), n_threads, step_s * 1e3, 100 * share);
  }
  lm::Json j{{"bench", "loader"},          {"batch", batch},
             {"seq_len", seq},             {"tokens", total},
             {"open_s", open_s},           {"us_per_batch", per_batch * 1e6},
             {"us_per_batch_doc_aligned", per_batch_aligned * 1e6},
             {"preset", preset},           {"step_ms", step_s * 1e3},
             {"loader_share", share},      {"threads", n_threads},
             {"checksum", checksum}};
  std::printf("%s\n", j.dump().c_str());
  if (!tmp.empty()) (void)lm::remove_tree(tmp.string());
  return 0;
}
