// lmeval mc: zero-shot multiple-choice benchmarks with lm-evaluation-harness prompts.
#include <cstdio>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "app/commands.h"
#include "app/eval_tables.h"
#include "eval/evaluate.h"
#include "eval/tasks.h"

namespace lm::app {

void add_run_flags(CLI::App* sub, eval::RunOptions& r);  // cmd_nll.cpp

void add_mc(CLI::App& app, Registry& reg) {
  static eval::McOptions o;
  static std::string tasks = "hellaswag,piqa,arc_easy,arc_challenge,copa,winogrande,openbookqa";
  auto* sub = app.add_subcommand("mc", "multiple-choice benchmarks: acc, acc_norm, acc_bytes, model vs twin");
  add_run_flags(sub, o.run);
  sub->add_option("--tasks", tasks,
                  "comma separated: " + absl::StrJoin(eval::task_names(), ",") + ", benqa (= bn + en), bangla (the Bangla "
                  "group), all")
      ->capture_default_str();
  sub->add_option("--data-dir", o.data_dir,
                  "folder with one sub-folder per task in the original formats (docs/eval.md); a Bangla task's split "
                  "as <split>.jsonl or as the Hugging Face hub's Parquet, <split>.parquet or its shards "
                  "<split>-00000-of-0000N.parquet or <split>/0000.parquet ... (docs/benchmarks.md)")
      ->required();
  sub->add_option("--limit", o.limit, "first N examples of each task (0 = all)")->capture_default_str();
  sub->add_option("--num-fewshot", o.num_fewshot,
                  "k solved examples before each item of a Bangla task, picked as lm-evaluation-harness does (its "
                  "first_n sampler or Random(1234).sample, per the task's YAML; docs/eval.md); English tasks: 0")->capture_default_str();
  sub->add_option("--prefix", o.prefix, "token before every context: bos (lm-evaluation-harness >= 0.4.10 on our export), eos, "
                  "none (harness <= 0.4.9.1); default: where a document starts in training, from the tokenizer's "
                  "framing (bos for bos + text + eos)");
  sub->add_option("--log-samples", o.log_samples, "per-example JSONL (contexts, continuations, log-probs, predictions)");
  sub->add_flag("--strict", o.strict,
                "stop at an example whose continuation is longer than the model's context (default: skip it and "
                "count it per task, 'too long' in the table, skipped_too_long in the JSON)");
  sub->footer(
      "Examples:\n"
      "  lmeval mc --run runs/demo --data-dir ../shared/data/bench --tasks all --twin\n"
      "  lmeval mc --run runs/demo --data-dir bench/ --tasks copa,benqa --limit 100 --log-samples mc.jsonl\n"
      "  lmeval mc --run runs/cpt --compare Llama-3.2-1B/ --data-dir bench/ --tasks piqa,arc_easy\n"
      "  lmeval mc --run Llama-3.2-1B/ --data-dir bench/ --tasks bangla_mmlu,m_mmlu_bn --num-fewshot 5\n"
      "  lmeval mc --run runs/cpt --data-dir bench_bn/ --tasks bangla   # bench_bn/piqa_bn/validation.parquet, ...");
  add_global_flags(sub);
  reg.push_back({sub, [] {
                   o.tasks = absl::StrSplit(tasks, ',', absl::SkipEmpty());
                   o.run.threads = global_options().threads;
                   LM_ASSIGN_OR_RETURN(Json result, eval::run_mc(o));
                   std::fputs(mc_table(o, result).c_str(), stdout);
                   return absl::OkStatus();
                 }});
}

}  // namespace lm::app
