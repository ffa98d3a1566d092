// Text samples during training: at each periodic validation the trainer continues a few fixed
// prompts greedily (model/generate.h, KV cache, eval mode, no grad) and logs what the model wrote
// to samples.jsonl and TensorBoard's Text tab, so a researcher reads the model learning, not only
// its loss. Greedy decoding draws no random numbers: the training trajectory is the same with
// samples on or off.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "model/transformer.h"

namespace lm::train {

// The run's tokenizer as functions: `lmtrain fit` fills them from tokenizer::Tokenizer, tests
// pass their own. Without encode/decode the trainer writes no samples (it has only token ids).
struct TextCodec {
  std::function<std::vector<int32_t>(std::string_view)> encode;
  std::function<std::string(const std::vector<int32_t>&)> decode;
  int32_t bos_id = -1;  // documents are trained as bos + text + eos
  int32_t eos_id = -1;  // generation stops after it
  bool usable() const { return encode && decode; }
};

struct SamplePrompt {
  std::string name;          // the validation language ("bn", "en") or "p1", "p2", ... (config list)
  std::string text;          // the prompt as text (decoded from its tokens)
  std::vector<int32_t> ids;  // what the model is given: bos + the prompt's tokens
};

// Tokens of a validation text that make its prompt: a few words, short enough that the
// continuation (not the prompt) is most of a sample.
inline constexpr int64_t kValidationPromptTokens = 8;

// `prompts` (train.eval.sample_prompts) encoded with bos; when empty, each language's first validation
// window from its first bos on (else from its start), kValidationPromptTokens tokens long.
std::vector<SamplePrompt> make_sample_prompts(const std::vector<std::string>& prompts,
                                              const std::map<std::string, std::vector<std::vector<int32_t>>>& val,
                                              const TextCodec& codec);

// Greedy continuations of `max_new_tokens` tokens (fewer at eos or the model's context) of each
// prompt, as one samples.jsonl line:
//   {"step", "tokens", "seconds", "new_tokens",
//    "samples": [{"name", "prompt", "completion", "new_tokens", "stopped_at_eos"}]}
// `seconds` is the whole cost (prefill and decode of every prompt), said so it can be budgeted.
Json generate_samples(model::Transformer& model, const std::vector<SamplePrompt>& prompts, int64_t max_new_tokens,
                      const TextCodec& codec, int64_t step, int64_t tokens_seen);

}  // namespace lm::train
