#include "eval/model_scorer.h"

#include <algorithm>
#include <numeric>

#include "core/log.h"
#include "model/autocast.h"
#include "model/fused_ops.h"

namespace lm::eval {
namespace {

// log p(target) of each row of h [N, C]: the LM head and the fp32 log-softmax a chunk of rows at a
// time (~16 MB of logits, which stay in cache between the two), without writing the [N, V]
// log-probabilities. On the CPU the log-sum-exp is lmforge's cross-entropy kernel, the one the
// training step runs (cross_entropy.cpu: one pass per row, fp32 or bf16 logits); elsewhere ATen's
// logsumexp in fp32. `autocast` runs the head under CPU bf16 autocast (bf16 logits).
torch::Tensor head_log_probs(model::Transformer& model, const torch::Tensor& h, const torch::Tensor& targets,
                             bool autocast) {
  const int64_t n = h.size(0), V = model->config().vocab_size;
  const int64_t chunk = std::max<int64_t>(16, (int64_t{16} << 20) / (4 * V));
  std::vector<torch::Tensor> parts;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = std::min(chunk, n - r0);
    torch::Tensor logits;
    {
      model::AutocastGuard ac(h.device(), autocast);
      logits = model->head(h.narrow(0, r0, m)).contiguous();
    }
    auto t = targets.narrow(0, r0, m).contiguous();
    if (logits.is_cpu()) {
      parts.push_back(model::cpu_softmax_xent_rows(logits, t).neg_());
    } else {
      auto l = logits.to(torch::kFloat32);
      auto lp = l.gather(1, t.unsqueeze(1)).squeeze(1) - torch::logsumexp(l, -1);
      parts.push_back(lp.to(torch::kFloat64).cpu());
    }
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

}  // namespace

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
    const bool cpu_bf16 = opts.bf16 && opts.device.is_cpu();
    auto idx = torch::tensor(rows, torch::kInt64).to(opts.device);
    auto tgt = torch::tensor(tgts, torch::kInt64).to(opts.device);
    torch::Tensor picked;
    {
      model::AutocastGuard ac(opts.device, cpu_bf16);
      auto h = model->hidden(tokens.to(opts.device));
      picked = h.reshape({B * T, h.size(-1)}).index_select(0, idx);
    }
    auto lp = head_log_probs(model, picked, tgt, cpu_bf16);
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
