// Multiple-choice benchmarks: loaders for the original file formats and prompt builders that
// reproduce EleutherAI lm-evaluation-harness's zero-shot requests (docs/eval.md lists each task's
// file, split and prompt).
//
// Every example becomes one (context, continuation) request per choice. For ordinary tasks the
// context is shared and the continuation is target_delimiter (" ") + choice; for Winogrande
// ("partial scoring") the choice fills the blank inside the context and the continuation, the
// rest of the sentence, is shared. `norm_text` holds the strings the harness measures for
// acc_norm (its doc_to_choice output, delimiter excluded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::eval {

struct McExample {
  std::string id;
  std::vector<std::string> contexts;       // one per choice
  std::vector<std::string> continuations;  // one per choice, delimiter included
  std::vector<std::string> norm_text;      // one per choice: acc_norm / acc_bytes length source
  int gold = 0;
};

struct McTask {
  std::string name;    // hellaswag, piqa, ..., benqa_bn
  std::string source;  // file read
  std::string split;   // "validation", "dev (ARC Dev, not the harness's Test split)", ...
  std::vector<McExample> examples;
  // The harness reports acc only (WinoGrande: acc_norm would divide by the *context* length and
  // favour the longer option; COPA: its yaml lists acc alone): no acc_norm / acc_bytes then.
  bool acc_only = false;
  // HellaSwag from the text export: items whose ctx_b was recovered and capitalised (see
  // hellaswag_split_export_line); empty otherwise.
  std::string note;
  // Mean of 1/num_choices over the examples: the expected accuracy of a random guess.
  double chance() const;
};

// Task names lmeval mc knows, in the default order: the English ones, BEnQA, then the Bangla group
// (eval/tasks_bn.h).
std::vector<std::string> task_names();

// Loads `name` from DIR/<folder>/ (folder = name, arc_* and benqa_* as documented); `limit` > 0
// keeps the first `limit` examples. A missing file is NotFound "not found, expected PATH".
// `num_fewshot` > 0: k examples before each item (the Bangla tasks that the harness samples first_n,
// eval/tasks_bn.h); the English tasks are zero-shot only.
absl::StatusOr<McTask> load_task(const std::string& name, const std::string& data_dir,
                                 int64_t limit = 0, int64_t num_fewshot = 0);

// ---- prompt builders (pure; tests compare their strings with the harness's) ----

// HellaSwag text as the harness preprocesses it: strip, " [title]" -> ". ", drop "[...]",
// "  " -> " ".
std::string hellaswag_preprocess(const std::string& text);
// `query` and `endings` already preprocessed (the text export ships them that way).
McExample hellaswag_example(const std::string& query, const std::vector<std::string>& endings,
                            int label);
// Original hellaswag_val.jsonl fields: query = preprocess(activity_label + ": " + ctx_a + " " +
// capitalize(ctx_b)), endings preprocessed.
McExample hellaswag_from_fields(const std::string& activity_label, const std::string& ctx_a,
                                const std::string& ctx_b, const std::vector<std::string>& endings,
                                int label);
// The llama.cpp text export's query line is preprocess(activity_label + ": " + ctx_a + " " + ctx_b)
// with ctx_b *not* capitalised and the fields lost. HellaSwag's ctx_b is the lower-case start of
// the context's last sentence (ActivityNet and WikiHow alike), so the text after the last
// sentence end (". ", "! ", "? ") is taken as ctx_b when it starts with a lower-case ASCII letter
// (3,243 of the 10,042 validation items), else ctx_b is empty. activity_label is the text before
// the first ": ". The three fields then go through hellaswag_from_fields, i.e. the harness's own
// capitalize + preprocess (tests/eval/harness_check.py splits the same way and calls the
// harness's process_docs).
struct HellaswagFields {
  std::string activity_label, ctx_a, ctx_b;
};
HellaswagFields hellaswag_split_export_line(const std::string& line);
// PIQA, ARC, BEnQA-en: "Question: <q>\nAnswer:" + " <choice>". `question_word`/`answer_word`
// let BEnQA-bn use the Bangla words.
McExample question_answer_example(const std::string& question, const std::vector<std::string>& choices,
                                  int gold, const std::string& question_word = "Question",
                                  const std::string& answer_word = "Answer");
// OpenBookQA: the bare question stem + " <choice>".
McExample openbookqa_example(const std::string& stem, const std::vector<std::string>& choices, int gold);
// COPA: premise without its final character + " because" / " therefore"; choices
// " " + first letter lower-cased, and the harness's target delimiter " " in front again, so the
// continuation starts with two spaces (docs/eval.md).
McExample copa_example(const std::string& premise, const std::string& question /* cause|effect */,
                       const std::string& choice1, const std::string& choice2, int label);
// Winogrande partial scoring: contexts sentence[:blank] + option, continuation
// " " + strip(sentence[blank+1:]). `answer` is 1 or 2.
absl::StatusOr<McExample> winogrande_example(const std::string& sentence, const std::string& option1,
                                             const std::string& option2, int answer);

}  // namespace lm::eval
