// The Bangla multiple-choice tasks of lm-evaluation-harness 0.4.13, read from local copies of
// their Hugging Face datasets in the schema the harness's YAML reads (docs/benchmarks.md), with the
// YAML's prompt, choices, target and metrics, and --num-fewshot examples as the harness picks them.
//
// DATA/<task>/<split>.jsonl, <split> as the YAML names it (bangla_mmlu/test.jsonl + dev.jsonl for
// few-shot, piqa_bn/validation.jsonl + train.jsonl, ...), or the split as the hub ships it:
// <split>.parquet, or its shards <split>-NNNNN-of-MMMMM[-hash].parquet read in shard order, or
// its automatic conversion <split>/0000.parquet, <split>/0001.parquet, ... (corpus/parquet_rows.h;
// a build without Arrow refuses them, naming LM_WITH_PARQUET). When more
// than one of these is there, the first in that order is read and the log says so. Every example's context is
//   description + k x (fewshot query + " " + its gold choice + "\n\n") + query
// (the harness's fewshot_context for plain text: the description is its system message with no
// delimiter after it), and each choice is scored as " " + choice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "eval/tasks.h"

namespace lm::eval {

// bangla_mmlu, piqa_bn, boolqa_bn, openbookqa_bn, bangla_commonsenseqa, belebele_ben_Beng,
// global_mmlu_bn, arc_bn, hellaswag_bn, m_mmlu_bn: the `bangla` group, in that order.
std::vector<std::string> bangla_task_names();
bool is_bangla_task(const std::string& name);

// Loads a Bangla task from DATA/<name>/; `limit` > 0 keeps the first `limit` test examples (the
// few-shot pool is the whole few-shot split). `num_fewshot` k > 0: k examples as the harness picks
// them: first_n (the first k of the few-shot split) or its default sampler (Python's
// Random(1234).sample per document in order: global_mmlu_bn per category, arc_bn from train,
// hellaswag_bn from val without the item itself; eval/py_random.h).
absl::StatusOr<McTask> load_bangla_task(const std::string& name, const std::string& data_dir, int64_t limit,
                                        int64_t num_fewshot);

// One document of a task as the harness renders it (pure, for tests): the query (doc_to_text),
// choices (doc_to_choice) and the gold index (doc_to_target resolved as the harness does: an int
// or a digit string is the index, another string is looked up in the choices). `where` names the
// line in errors.
struct BanglaDoc {
  std::string query;
  std::vector<std::string> choices;
  int gold = 0;
};
absl::StatusOr<BanglaDoc> bangla_doc(const std::string& task, const Json& doc, const std::string& where);

// Python's str.strip(): every character for which str.isspace() is true, at both ends.
std::string py_strip(const std::string& s);

}  // namespace lm::eval
