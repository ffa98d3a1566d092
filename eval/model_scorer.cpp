#include "eval/model_scorer.h"

#include <algorithm>
#include <numeric>

#include "core/log.h"

namespace lm::eval {

std::vector<std::vector<double>> score_requests(model::Transformer& model,
                                                const std::vector<TokenRequest>& requests,
                                                const ScorerOptions& opts) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t max_len = model->config().max_seq_len;
  std::vector<std::vector<double>> out(requests.size());

  // Build each sequence: input = (ctx + cont)[-(L+1):][:-1]; the last |cont| targets are scored.
  struct Seq {
    std::vector<int64_t> input, targets;  // targets: the scored tokens, in order
    size_t index;
  };
  std::vector<Seq> seqs(requests.size());
  int64_t total_tokens = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    std::vector<int64_t> full(r.context.begin(), r.context.end());
    full.insert(full.end(), r.continuation.begin(), r.continuation.end());
    TORCH_CHECK(full.size() >= 2, "request ", i, " has fewer than 2 tokens (context + continuation)");
    const int64_t n_cont = std::min<int64_t>(r.continuation.size(), max_len);
    const size_t start = full.size() > static_cast<size_t>(max_len + 1) ? full.size() - (max_len + 1) : 0;
    seqs[i].input.assign(full.begin() + start, full.end() - 1);
    seqs[i].targets.assign(full.end() - n_cont, full.end());
    seqs[i].index = i;
    total_tokens += static_cast<int64_t>(seqs[i].input.size());
  }
  std::vector<size_t> order(seqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return seqs[a].input.size() > seqs[b].input.size(); });

  std::unique_ptr<Progress> progress;
  if (!opts.progress_label.empty())
    progress = std::make_unique<Progress>(opts.progress_label, static_cast<double>(total_tokens), "tok");
  // Progress counts the tokens through the model (the work, so the ETA holds); the line also
  // says how many of them were scored, which is fewer with sliding windows or long contexts.
  int64_t done_tokens = 0, scored_tokens = 0;
  const int64_t bs = std::max<int64_t>(opts.batch_size, 1);
  for (size_t b0 = 0; b0 < order.size(); b0 += bs) {
    const size_t b1 = std::min(order.size(), b0 + static_cast<size_t>(bs));
    const int64_t B = static_cast<int64_t>(b1 - b0);
    const int64_t T = static_cast<int64_t>(seqs[order[b0]].input.size());
    auto tokens = torch::zeros({B, T}, torch::kInt64);
    std::vector<int64_t> rows, cols, tgts;
    for (int64_t k = 0; k < B; ++k) {
      const Seq& s = seqs[order[b0 + k]];
      const int64_t n = static_cast<int64_t>(s.input.size());
      std::memcpy(tokens[k].data_ptr<int64_t>(), s.input.data(), n * sizeof(int64_t));
      const int64_t m = static_cast<int64_t>(s.targets.size());
      for (int64_t j = 0; j < m; ++j) {
        rows.push_back(k * T + (n - m + j));  // position n-m+j predicts target j
        tgts.push_back(s.targets[j]);
      }
      done_tokens += n;
      scored_tokens += m;
    }
    // h: [B, T, C] -> only the scored positions [N, C] -> logits [N, V] -> log-probs (fp32)
    auto h = model->hidden(tokens.to(opts.device));
    auto idx = torch::tensor(rows, torch::kInt64).to(opts.device);
    auto picked = h.reshape({B * T, h.size(-1)}).index_select(0, idx);
    auto logp = torch::log_softmax(model->head(picked).to(torch::kFloat32), -1);
    auto tgt = torch::tensor(tgts, torch::kInt64).to(opts.device);
    auto lp = logp.gather(1, tgt.unsqueeze(1)).squeeze(1).to(torch::kFloat64).cpu();
    const double* p = lp.data_ptr<double>();
    size_t q = 0;
    for (int64_t k = 0; k < B; ++k) {
      const Seq& s = seqs[order[b0 + k]];
      auto& dst = out[s.index];
      dst.assign(p + q, p + q + s.targets.size());
      q += s.targets.size();
    }
    if (progress) progress->update(static_cast<double>(done_tokens), format_count(scored_tokens) + " scored");
  }
  if (progress) progress->finish(format_count(scored_tokens) + " scored");
  return out;
}

model::Transformer make_twin(const model::ModelConfig& cfg, uint64_t seed) {
  model::Transformer twin(cfg);
  twin->init_weights(seed);
  twin->eval();
  return twin;
}

Scorer make_model_scorer(model::Transformer model, ScorerOptions opts) {
  return [model, opts](const std::vector<TokenRequest>& reqs) mutable
             -> absl::StatusOr<std::vector<std::vector<double>>> {
    try {
      return score_requests(model, reqs, opts);
    } catch (const c10::Error& e) {
      return absl::InternalError(std::string("scoring failed: ") + e.what_without_backtrace());
    }
  };
}

}  // namespace lm::eval
