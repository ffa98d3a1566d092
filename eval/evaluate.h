// The two lmeval jobs as library calls (the app/ mains only parse flags): NLL per language
// against the random-initialized twin, and multiple-choice tasks. Each writes its JSON into
// runs/NAME/eval/ atomically and returns it; app/ prints the tables (app/eval_tables.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace lm::eval {

struct RunOptions {
  std::string run;            // a run folder of 'lmtrain fit', or an HF checkpoint folder (config.json + safetensors)
  int64_t step = -1;          // -1: latest
  bool twin = false;
  int64_t batch_size = 16;
  std::string device = "auto";  // auto (cuda when visible, else cpu, as lmtrain fit) | cpu | cuda
  // auto | fp32 | bf16. auto: nll on the CPU in bf16 where its first windows move by at most 0.1%
  // against fp32, else fp32; mc and CUDA in fp32 (docs/eval.md, "Speed and dtype").
  std::string dtype = "auto";
  std::string out;            // result file; default runs/NAME/eval/<job>.json
  int threads = 0;            // --threads: > 0 forces; 0 measures 1 vs all cores (eval/run.h choose_threads)
  uint64_t seed = 0;          // --seed: the twin's init seed for an HF folder (a run folder uses its train.seed)
  // --compare: a second model (run or HF folder, latest checkpoint) scored on the same items, each
  // with its own tokenizer; nll reports both and the difference, mc McNemar's test against it.
  std::string compare;
};

// --device of lmeval nll/mc/sample: "auto" is cuda when a CUDA device is visible, else cpu (as
// lmtrain fit); "cpu" and "cuda" are taken as asked (cuda without a device is FailedPrecondition).
// Returns "cpu" or "cuda"; `why` says how it was chosen (for the log and the result JSON).
absl::StatusOr<std::string> resolve_device(const std::string& asked, bool cuda_available, std::string* why);

struct NllOptions {
  RunOptions run;
  std::string data;                // shards/ folder (validation shards), or
  std::string text;                // a text file, one document per line
  std::vector<std::string> langs;  // empty: every language with val shards
  int64_t seq_len = 0;             // 0: the model's max_seq_len
  int64_t stride = 0;              // 0: non-overlapping windows
  int64_t max_tokens = 0;          // per language, 0 = all
  std::string dump_tokens;         // JSON with every window's tokens and per-token NLL
  // stream: windows over the token stream as training sees it (documents framed as the tokenizer
  // says, each BOS and EOS scored). harness: lm-evaluation-harness's loglikelihood_rolling — each
  // document's text on its own after the framing's start token (BOS with bos + text + eos, else
  // EOS), rolling windows, BOS/EOS never scored, bytes of each document decoded on its own.
  std::string docs = "stream";
};
absl::StatusOr<Json> run_nll(const NllOptions& o);

struct McOptions {
  RunOptions run;
  std::string data_dir;
  std::vector<std::string> tasks;  // names; "benqa" = benqa_bn + benqa_en, "bangla" = the Bangla group, "all" = every task
  int64_t limit = 0;
  int64_t num_fewshot = 0;         // k examples before each item (Bangla first_n tasks; eval/tasks_bn.h)
  // Token before every context: "" (default) = where a document starts in training, from the
  // run's tokenizer framing (bos + text + eos: bos, which is also what the harness's hf model does
  // on our export; text + eos: eos) | bos | eos | none. The result JSON names the one used.
  std::string prefix;
  std::string log_samples;         // per-example JSONL
  // An example with a continuation longer than the model's context cannot be scored: false (the
  // default) leaves it out and counts it per task ("skipped_too_long"); true stops the evaluation.
  bool strict = false;
};
absl::StatusOr<Json> run_mc(const McOptions& o);

// One sentence for the result JSON: what `prefix` puts before a context and whose convention it is.
std::string prefix_rule(const std::string& prefix);
// The prefix a framing implies: "bos" with framing.bos, else "eos" (Tokenizer::start_id()).
std::string default_prefix(const tokenizer::Framing& framing);

// The token(s) before a context (mc) or a prompt (lmeval sample): `prefix` "" = the tokenizer's
// framing (default_prefix), else bos | eos | none; anything else is InvalidArgument.
struct ContextPrefix {
  std::string mode;  // bos | eos | none
  std::vector<int32_t> ids;
  bool from_framing = false;
};
absl::StatusOr<ContextPrefix> context_prefix(const tokenizer::Tokenizer& tok, const std::string& prefix);

// "a,b,benqa" -> {"a", "b", "benqa_bn", "benqa_en"}; "bangla" -> the Bangla group; "all" -> every task.
std::vector<std::string> expand_tasks(const std::vector<std::string>& names);

}  // namespace lm::eval
