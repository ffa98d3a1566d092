#include "model/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

namespace lm::model {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int32_t pick_token(const torch::Tensor& logits_in, double temperature, double top_p, uint64_t* rng_state) {
  auto logits = logits_in.to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t V = logits.numel();
  const double* l = logits.data_ptr<double>();
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(l, l + V) - l);
  // Softmax of logits / T in double, then the nucleus: sort by probability, keep the prefix
  // whose mass first reaches top_p, renormalise, draw.
  const double mx = *std::max_element(l, l + V);
  std::vector<double> p(V);
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += (p[i] = std::exp((l[i] - mx) / temperature));
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size()) {
    mass += p[order[keep++]] / z;
    if (mass >= top_p) break;
  }
  std::mt19937_64 gen(*rng_state);
  *rng_state = gen();  // advance the caller's state so each call draws fresh
  const double u = std::uniform_real_distribution<double>(0.0, mass)(gen);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[order[i]] / z;
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

std::string continuation_text(const std::function<std::string(const std::vector<int32_t>&)>& decode,
                              const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string whole = decode(all), head = decode(prompt);
  size_t n = 0;
  while (n < head.size() && n < whole.size() && head[n] == whole[n]) ++n;
  while (n > 0 && n < whole.size() && (static_cast<unsigned char>(whole[n]) & 0xC0) == 0x80) --n;  // a lead byte
  return whole.substr(n);
}

Generation generate(Transformer& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                    bool keep_logits) {
  TORCH_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto device = model->parameters().front().device();
  const int64_t max_len = model->config().max_seq_len;
  Generation g;
  g.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  if (static_cast<int64_t>(seq.size()) > max_len) seq.erase(seq.begin(), seq.end() - max_len);
  uint64_t rng = opt.seed;
  KVCache cache;
  auto as_tensor = [&](const int64_t* p, int64_t n) {
    return torch::from_blob(const_cast<int64_t*>(p), {1, n}, torch::kInt64).clone().to(device);
  };
  auto t0 = Clock::now();
  // logits of the last position: [V]
  torch::Tensor last;
  if (opt.use_cache) {
    last = model->forward_cached(as_tensor(seq.data(), seq.size()), cache)[0][-1];
  } else {
    last = model->forward(as_tensor(seq.data(), seq.size()))[0][-1];
  }
  g.prefill_seconds = since(t0);
  auto t1 = Clock::now();
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    auto lf = last.to(torch::kCPU, torch::kFloat32);
    if (keep_logits) g.logits.emplace_back(lf.data_ptr<float>(), lf.data_ptr<float>() + lf.numel());
    const int32_t next = pick_token(lf, opt.temperature, opt.top_p, &rng);
    g.tokens.push_back(next);
    if (opt.eos_id >= 0 && next == opt.eos_id) {
      g.stopped_at_eos = true;
      break;
    }
    if (i + 1 == opt.max_new_tokens) break;
    if (static_cast<int64_t>(seq.size()) + 1 > max_len) {
      g.stopped_at_context = true;
      break;
    }
    seq.push_back(next);
    if (opt.use_cache) {
      last = model->forward_cached(as_tensor(&seq.back(), 1), cache)[0][-1];
    } else {
      last = model->forward(as_tensor(seq.data(), seq.size()))[0][-1];
    }
  }
  g.decode_seconds = since(t1);
  g.tokens_per_s = g.decode_seconds > 0 ? g.tokens.size() / g.decode_seconds : 0;
  if (was_training) model->train();
  return g;
}

}  // namespace lm::model
