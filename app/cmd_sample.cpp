// lmeval sample: text generation from a run's checkpoint with the KV cache (model/generate.h).
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "app/commands.h"
#include "core/config.h"
#include "core/run_folder.h"
#include "eval/evaluate.h"
#include "eval/run.h"
#include "model/checkpoint_reader.h"
#include "model/generate.h"
#include "tokenizer/tokenizer.h"

namespace lm::app {
namespace fs = std::filesystem;
namespace {

struct SampleCli {
  std::string run, prompt;
  int64_t step = -1;
  model::SampleOptions opt;
  std::string prefix;  // "" = the tokenizer's framing (bos + text + eos: bos; text + eos: eos) | bos | eos | none
  std::string device = "auto";  // auto | cpu | cuda (eval::resolve_device)
  bool no_cache = false, no_bos = false, json = false;
};

// The token before the prompt: where a document's text starts in training (the tokenizer's
// framing), unless --prefix / --no-bos say otherwise; the same rule as lmeval mc's contexts.
absl::StatusOr<eval::ContextPrefix> prompt_prefix(const SampleCli& o, const tokenizer::Tokenizer& tok) {
  if (o.no_bos && !o.prefix.empty() && o.prefix != "none")
    return absl::InvalidArgumentError("--no-bos (= --prefix none) contradicts --prefix " + o.prefix);
  return eval::context_prefix(tok, o.no_bos ? "none" : o.prefix);
}

absl::Status run_sample(const SampleCli& o) {
  const RunFolder run(o.run);
  std::string device_why;
  LM_ASSIGN_OR_RETURN(const std::string device, eval::resolve_device(o.device, torch::cuda::is_available(), &device_why));
  LM_ASSIGN_OR_RETURN(model::TrainedModel t, model::load_trained_model(o.run, o.step));
  model::Transformer& m = t.model;
  m->to(device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU));
  const std::string& ckpt = t.checkpoint;
  eval::choose_threads(global_options().threads, m, 1, 16);  // decode steps' shapes: one token, 16 of them
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(run.tokenizer()));
  if (o.opt.temperature < 0) return absl::InvalidArgumentError("--temperature: must be >= 0 (0 = greedy)");
  if (o.opt.top_p <= 0 || o.opt.top_p > 1) return absl::InvalidArgumentError("--top-p: must be in (0, 1]");
  LM_ASSIGN_OR_RETURN(auto start, prompt_prefix(o, tok));
  const std::vector<int32_t> prompt = tok.encode(o.prompt);
  std::vector<int32_t> ids = start.ids;
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  model::SampleOptions opt = o.opt;
  opt.eos_id = tok.eos_id();
  opt.use_cache = !o.no_cache;
  model::Generation g = model::generate(m, ids, opt);
  // decode(prompt + new) - decode(prompt): keeps the space a new word starts with
  const std::string text =
      model::continuation_text([&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); }, prompt, g.tokens);
  if (o.json) {
    Json j = {{"prompt", o.prompt}, {"completion", text}, {"tokens", g.tokens}, {"prompt_tokens", g.prompt_tokens},
              {"tokens_per_s", g.tokens_per_s}, {"prefill_s", g.prefill_seconds}, {"decode_s", g.decode_seconds},
              {"stopped_at_eos", g.stopped_at_eos}, {"checkpoint", ckpt}, {"kv_cache", opt.use_cache},
              {"prefix", start.mode}, {"framing", tok.framing().describe()}, {"device", device},
              {"device_rule", device_why}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s%s\n", o.prompt.c_str(), text.c_str());
    std::fprintf(stderr, "[%zu new tokens, %.1f tok/s %s KV cache on %s (%s), prompt %ld tokens in %.3f s%s; %s]\n",
                 g.tokens.size(), g.tokens_per_s, opt.use_cache ? "with" : "without", device.c_str(),
                 device_why.c_str(), g.prompt_tokens, g.prefill_seconds, g.stopped_at_eos ? ", stopped at eos" : "",
                 ckpt.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void add_sample(CLI::App& app, Registry& reg) {
  static SampleCli o;
  auto* sub = app.add_subcommand("sample", "generate text from a run's checkpoint (greedy or top-p, KV cache)");
  sub->add_option("--run", o.run, "run folder written by 'lmtrain fit'")->required();
  sub->add_option("--prompt", o.prompt, "prompt text")->required();
  sub->add_option("--step", o.step, "checkpoint step (default: latest)");
  sub->add_option("--max-new-tokens", o.opt.max_new_tokens, "tokens to generate")->capture_default_str();
  sub->add_option("--temperature", o.opt.temperature, "0 = greedy; > 0 samples")->capture_default_str();
  sub->add_option("--top-p", o.opt.top_p, "nucleus mass kept when sampling")->capture_default_str();
  sub->add_option("--seed", o.opt.seed, "sampling seed")->capture_default_str();
  sub->add_flag("--no-cache", o.no_cache, "recompute the whole prefix each token (reference path)");
  sub->add_option("--prefix", o.prefix, "token before the prompt: bos, eos or none; default: where a document starts "
                  "in training, from the tokenizer's framing (bos for bos + text + eos)");
  sub->add_flag("--no-bos", o.no_bos, "nothing before the prompt (= --prefix none)");
  sub->add_flag("--json", o.json, "one JSON line instead of text");
  sub->add_option("--device", o.device, "auto (cuda when a CUDA device is visible, else cpu, as fit), cpu or cuda")
      ->capture_default_str();
  sub->footer(
      "Examples:\n"
      "  lmeval sample --run runs/demo --prompt \"বাংলাদেশের রাজধানী\"\n"
      "  lmeval sample --run runs/demo --prompt \"Once upon\" --temperature 0.8 --top-p 0.95 --seed 7");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_sample(o); }});
}

}  // namespace lm::app
