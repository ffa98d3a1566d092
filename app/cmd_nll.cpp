// lmeval nll: per-token NLL, perplexity, bits per byte / char per language, model vs twin.
#include <cstdio>

#include "absl/strings/str_split.h"
#include "app/commands.h"
#include "app/eval_tables.h"
#include "eval/evaluate.h"

namespace lm::app {

void add_run_flags(CLI::App* sub, eval::RunOptions& r) {
  sub->add_option("--run", r.run,
                  "run folder written by 'lmtrain fit', or an HF checkpoint folder (Llama/Qwen2 config.json + "
                  "safetensors + its tokenizer.json or tokenizer.model)")->required();
  sub->add_option("--step", r.step, "checkpoint step (default: the one 'latest' names)");
  sub->add_flag("--twin", r.twin, "also score the random-initialized twin (same config, same seed, untrained)");
  sub->add_option("--seed", r.seed, "the twin's init seed for an HF folder (a run folder's twin uses its train.seed)")
      ->capture_default_str();
  sub->add_option("--compare", r.compare,
                  "a second model (run or HF folder) scored on the same items with its own tokenizer: nll prints "
                  "both and compare - model (bits/byte), mc McNemar's test against it");
  sub->add_option("--batch-size", r.batch_size, "sequences per forward pass")->capture_default_str();
  sub->add_option("--device", r.device, "auto (cuda when a CUDA device is visible, else cpu, as fit), cpu or cuda")
      ->capture_default_str();
  sub->add_option("--dtype", r.dtype,
                  "auto, fp32 or bf16 (auto: nll on the CPU in bf16 where its first windows' NLL moves <= 0.1% "
                  "against fp32; mc and cuda in fp32)")->capture_default_str();
  sub->add_option("--out", r.out,
                  "result JSON (default: RUN/eval/<command>-step<N>-<size>-<hash>.json, one per configuration, and "
                  "RUN/eval/<command>.json = the largest of them)");
}

void add_nll(CLI::App& app, Registry& reg) {
  static eval::NllOptions o;
  static std::string langs;
  auto* sub = app.add_subcommand("nll", "per-token NLL (nats), perplexity, bits/byte and bits/char vs a random twin");
  add_run_flags(sub, o.run);
  sub->add_option("--data", o.data, "shards/ folder from 'lmtrain prepare' (its validation shards are scored)");
  sub->add_option("--text", o.text, "a UTF-8 text file instead (one document per line, each followed by EOS)");
  sub->add_option("--lang", langs, "languages, comma separated (default: all with validation shards)");
  sub->add_option("--seq-len", o.seq_len, "window length in tokens (default: the model's max_seq_len)");
  sub->add_option("--stride", o.stride, "0 = non-overlapping windows; 0 < S < seq-len: sliding by S tokens")
      ->capture_default_str();
  sub->add_option("--max-tokens", o.max_tokens, "score at most N tokens per language (0 = all)")->capture_default_str();
  sub->add_option("--docs", o.docs,
                  "stream: the token stream as in training (documents joined by EOS, EOS scored); harness: "
                  "lm-evaluation-harness's definition (each document alone after BOS, EOS never scored)")
      ->capture_default_str();
  sub->add_option("--dump-tokens", o.dump_tokens, "write every window's tokens and per-token NLL to this JSON");
  sub->footer(
      "Examples:\n"
      "  lmeval nll --run runs/demo --data shards/ --lang bn,en --twin\n"
      "  lmeval nll --run runs/demo --text heldout.txt --stride 64 --seq-len 256\n"
      "  lmeval nll --run runs/cpt --compare Llama-3.2-1B/ --text bn_heldout.txt --docs harness   (base vs continued\n"
      "      run, two tokenizers: compare bits_per_text_byte)");
  add_global_flags(sub);
  reg.push_back({sub, [] {
                   if (!langs.empty()) o.langs = absl::StrSplit(langs, ',', absl::SkipEmpty());
                   o.run.threads = global_options().threads;
                   LM_ASSIGN_OR_RETURN(Json result, eval::run_nll(o));
                   std::fputs(nll_table(o, result).c_str(), stdout);
                   return absl::OkStatus();
                 }});
}

}  // namespace lm::app
