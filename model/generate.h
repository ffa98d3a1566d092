// Autoregressive generation from a Transformer: greedy (temperature 0) or temperature + top-p
// (nucleus) sampling (Holtzman et al. 2020), with or without the KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace lm::model {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0 = greedy (argmax); > 0 divides the logits before softmax
  double top_p = 1.0;        // keep the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;         // sampling RNG (std::mt19937_64): same seed, same text
  int32_t eos_id = -1;       // stop after emitting it (>= 0)
  bool use_cache = true;     // false: full forward over the whole prefix each step (the reference)
};

struct Generation {
  std::vector<int32_t> tokens;  // new tokens only
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the prompt's forward
  double decode_seconds = 0;   // all new tokens
  double tokens_per_s = 0;     // new tokens / decode_seconds
  bool stopped_at_eos = false;
  bool stopped_at_context = false;  // reached max_seq_len
  std::vector<std::vector<float>> logits;  // per new token, when keep_logits
};

// prompt must be non-empty. Runs on the model's device in eval mode without gradients.
Generation generate(Transformer& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                    bool keep_logits = false);

// The text `generated` adds after `prompt` (token ids, without a bos/eos before them):
// decode(prompt + generated) minus decode(prompt). Decoding the new tokens alone loses what
// depends on the tokens before them: SentencePiece drops the leading space of the first piece, so
// "The history of" + "▁the" printed "The history ofthe". Where the two decodings part inside a
// UTF-8 character (byte pieces), the difference starts at the last character boundary they share.
std::string continuation_text(const std::function<std::string(const std::vector<int32_t>&)>& decode,
                              const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated);

// Picks the next token from logits [V] (fp32, CPU); exposed for tests.
int32_t pick_token(const torch::Tensor& logits, double temperature, double top_p, uint64_t* rng_state);

}  // namespace lm::model
