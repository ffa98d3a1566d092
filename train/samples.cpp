#include "train/samples.h"

#include <algorithm>
#include <chrono>

#include "model/generate.h"

namespace lm::train {

std::vector<SamplePrompt> make_sample_prompts(const std::vector<std::string>& prompts,
                                              const std::map<std::string, std::vector<std::vector<int32_t>>>& val,
                                              const TextCodec& codec) {
  std::vector<SamplePrompt> out;
  if (!codec.usable()) return out;
  auto with_bos = [&](std::vector<int32_t> ids) {
    if (codec.bos_id >= 0 && (ids.empty() || ids.front() != codec.bos_id)) ids.insert(ids.begin(), codec.bos_id);
    return ids;
  };
  for (size_t i = 0; i < prompts.size(); ++i)
    out.push_back({"p" + std::to_string(i + 1), prompts[i], with_bos(codec.encode(prompts[i]))});
  if (!prompts.empty()) return out;
  for (const auto& [lang, windows] : val) {
    if (windows.empty() || windows.front().empty()) continue;
    const std::vector<int32_t>& w = windows.front();
    // A window is a cut of the validation stream: start at a document's bos when one leaves room
    // for a whole prompt, so the prompt is a text's first words rather than a word's tail.
    auto from = w.begin();
    const auto bos = std::find(w.begin(), w.end(), codec.bos_id);
    if (codec.bos_id >= 0 && w.end() - bos > kValidationPromptTokens) from = bos + 1;
    const auto to = from + std::min<int64_t>(kValidationPromptTokens, w.end() - from);
    std::vector<int32_t> words(from, to);
    out.push_back({lang, codec.decode(words), with_bos(words)});
  }
  return out;
}

Json generate_samples(model::Transformer& model, const std::vector<SamplePrompt>& prompts, int64_t max_new_tokens,
                      const TextCodec& codec, int64_t step, int64_t tokens_seen) {
  const auto t0 = std::chrono::steady_clock::now();
  model::SampleOptions opt;
  opt.max_new_tokens = max_new_tokens;
  opt.temperature = 0;  // greedy: comparable from step to step, and no RNG draws
  opt.eos_id = codec.eos_id;
  Json samples = Json::array();
  int64_t generated = 0;
  for (const SamplePrompt& p : prompts) {
    const model::Generation g = model::generate(model, p.ids, opt);
    std::vector<int32_t> text_ids = g.tokens;
    if (g.stopped_at_eos && !text_ids.empty()) text_ids.pop_back();  // eos ends the text, it is no text
    // decode(prompt + new) - decode(prompt): keeps the space a new word starts with (issue 30 item 3)
    const std::vector<int32_t> prompt(p.ids.begin() + (!p.ids.empty() && p.ids.front() == codec.bos_id), p.ids.end());
    generated += static_cast<int64_t>(g.tokens.size());
    samples.push_back({{"name", p.name},
                       {"prompt", p.text},
                       {"completion", model::continuation_text(codec.decode, prompt, text_ids)},
                       {"new_tokens", g.tokens.size()},
                       {"stopped_at_eos", g.stopped_at_eos}});
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Json{{"step", step}, {"tokens", tokens_seen}, {"seconds", seconds}, {"new_tokens", generated},
              {"samples", samples}};
}

}  // namespace lm::train
