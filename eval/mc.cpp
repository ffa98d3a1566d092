// lmeval mc as a library call: tasks loaded, every choice scored by the model (its twin and a
// --compare model), metrics and paired tests, the result JSON and the per-example log.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "eval/eval_common.h"
#include "eval/evaluate.h"
#include "eval/score.h"
#include "eval/tasks.h"
#include "eval/tasks_bn.h"

namespace lm::eval {
using namespace internal;

std::vector<std::string> expand_tasks(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (n == "all") {
      for (const auto& t : task_names()) out.push_back(t);
    } else if (n == "benqa") {
      out.push_back("benqa_bn");
      out.push_back("benqa_en");
    } else if (n == "bangla") {
      for (const auto& t : bangla_task_names()) out.push_back(t);
    } else if (!n.empty()) {
      out.push_back(n);
    }
  }
  return out;
}

namespace {

// The --tasks names expanded and known, and --prefix checked.
absl::StatusOr<std::vector<std::string>> mc_task_names(const McOptions& o) {
  auto names = expand_tasks(o.tasks);
  if (names.empty()) return absl::InvalidArgumentError("--tasks: no task named");
  for (const auto& n : names) {
    const auto known = task_names();
    if (std::find(known.begin(), known.end(), n) == known.end())
      return absl::InvalidArgumentError(absl::StrCat("--tasks: unknown task '", n, "' (known: ",
                                                     absl::StrJoin(known, ","), ", benqa, bangla, all)"));
  }
  if (!o.prefix.empty() && o.prefix != "bos" && o.prefix != "eos" && o.prefix != "none")
    return absl::InvalidArgumentError("--prefix: expected bos, eos or none, got '" + o.prefix + "'");
  return names;
}

// Every task is loaded before scoring so a missing file is reported before minutes of work;
// a task without data is skipped and listed in `missing`.
absl::StatusOr<std::vector<McTask>> load_mc_tasks(const McOptions& o, const std::vector<std::string>& names,
                                                  Json& missing) {
  std::vector<McTask> tasks;
  for (const auto& n : names) {
    auto t = load_task(n, o.data_dir, o.limit, o.num_fewshot);
    if (t.ok()) {
      tasks.push_back(std::move(*t));
    } else if (t.status().code() == absl::StatusCode::kNotFound) {
      log_warn("%s (skipped)", std::string(t.status().message()));
      missing[n] = std::string(t.status().message());
    } else {
      return t.status();
    }
  }
  if (tasks.empty()) return absl::NotFoundError(absl::StrCat("no task has data under ", o.data_dir, ": ", missing.dump()));
  return tasks;
}

// `o.prefix` is resolved (never empty); `from_framing`: it was not given and came from the framing.
Json mc_result_header(const Models& m, const McOptions& o, const Json& missing, bool from_framing) {
  Json result = run_header(m, o.run);
  result["kind"] = "mc";
  result["data_dir"] = o.data_dir;
  result["limit"] = o.limit;
  result["prefix"] = o.prefix;
  result["prefix_rule"] = prefix_rule(o.prefix);
  result["framing"] = m.run.tokenizer.framing().describe();
  result["prefix_from"] = from_framing ? "the tokenizer's framing (the default)" : "--prefix";
  result["num_fewshot"] = o.num_fewshot;
  result["scoring"] =
      (o.num_fewshot > 0 ? absl::StrCat(o.num_fewshot, "-shot (Bangla tasks: the first k of the YAML's few-shot split, "
                                                       "as the harness's first_n sampler)")
                         : std::string("zero-shot")) +
      ", lm-evaluation-harness prompts; score = sum of continuation token log-probs with the harness's "
      "_encode_pair; acc_norm divides by the choice's length in characters (delimiter excluded), acc_bytes by "
      "its UTF-8 bytes; stderr = sample sd / sqrt(n)";
  result["missing"] = missing;
  result["tasks"] = Json::object();
  return result;
}

// Scores of the model and, with --twin, of the twin on one task; with --compare, the second
// model's (its own tokenizer and prefix).
struct TaskRun {
  TaskScoring model, twin, compare;
  TaskMetrics model_metrics, twin_metrics, compare_metrics;
  bool has_compare = false;
};

// The --compare model and how it encodes: its own tokenizer and start token.
struct CompareModel {
  Models models;
  ContextPrefix prefix;
};

// The expected accuracy of a random guess over the examples scored.
double chance_of(const McTask& task, const std::vector<size_t>& kept) {
  double sum = 0;
  for (size_t i : kept) sum += 1.0 / std::max<size_t>(task.examples[i].contexts.size(), 1);
  return kept.empty() ? 0.0 : sum / static_cast<double>(kept.size());
}

void warn_skipped(const McTask& task, const TaskScoring& sm, int64_t window) {
  if (sm.skipped.empty()) return;
  const SkippedExample& first = sm.skipped.front();
  log_warn("%s: skipped %d of %d examples: a continuation is longer than the model's context of %d tokens (first: "
           "example %s choice %d, %d tokens); scored the other %d (--strict stops instead)",
           task.name, sm.skipped.size(), task.examples.size(), window, first.id, first.choice, first.continuation,
           sm.examples.size());
}

absl::StatusOr<TaskRun> score_mc_task(const Models& m, const McOptions& o, const McTask& task, const Encoder& encode,
                                      const TokenIds& prefix, const CompareModel* c) {
  const int64_t window = m.run.config.max_seq_len;
  TaskRun tr;
  LM_ASSIGN_OR_RETURN(tr.model, score_task(task, encode, scorer_for(m.run.model, m.scorer, task.name + " model"),
                                           prefix, window, o.strict));
  const TaskScoring& sm = tr.model;
  warn_skipped(task, sm, window);
  if (sm.truncated > 0)
    log_warn("%s: %d of %d requests are longer than the model's context (%d + 1 tokens): their contexts are "
             "cut from the left, as the harness does", task.name, sm.truncated, sm.requests.size(), window);
  if (sm.boundary_mismatches > 0)
    log_info("%s: %d of %d requests: encode(context) is not a prefix of encode(context + continuation); "
             "scored as the harness does (docs/eval.md)", task.name, sm.boundary_mismatches, sm.requests.size());
  tr.model_metrics = task_metrics(sm.examples, chance_of(task, sm.kept));
  if (o.run.twin) {
    LM_ASSIGN_OR_RETURN(tr.twin, score_task(task, encode, scorer_for(m.twin, m.scorer, task.name + " twin"), prefix,
                                            window, o.strict));
    tr.twin_metrics = task_metrics(tr.twin.examples, chance_of(task, tr.twin.kept));
  }
  if (c) {
    const tokenizer::Tokenizer& tok = c->models.run.tokenizer;
    const Encoder enc = [&tok](std::string_view s) { return tok.encode(s); };
    const int64_t cw = c->models.run.config.max_seq_len;
    LM_ASSIGN_OR_RETURN(tr.compare, score_task(task, enc, scorer_for(c->models.run.model, c->models.scorer,
                                                                     task.name + " compare"),
                                               c->prefix.ids, cw, o.strict));
    warn_skipped(task, tr.compare, cw);
    tr.compare_metrics = task_metrics(tr.compare.examples, chance_of(task, tr.compare.kept));
    tr.has_compare = true;
  }
  return tr;
}

// The UTF-8 bytes of every request of a task (contexts and continuations): the measure of its work
// for the overall ETA of mc (the forward passes grow with the tokens, the tokens with the bytes).
double task_bytes(const McTask& task) {
  double n = 0;
  for (const auto& ex : task.examples)
    for (size_t c = 0; c < ex.contexts.size(); ++c) n += ex.contexts[c].size() + ex.continuations[c].size();
  return n;
}

// McNemar's test of the model against the --compare model on the examples both scored (an
// example too long for one of them is left out of the pair).
Json paired_compare(const TaskRun& tr, bool norm) {
  std::map<size_t, bool> other;
  for (size_t i = 0; i < tr.compare.examples.size(); ++i)
    other[tr.compare.kept[i]] = norm ? tr.compare.examples[i].correct_norm() : tr.compare.examples[i].correct();
  std::vector<bool> a, b;
  for (size_t i = 0; i < tr.model.examples.size(); ++i) {
    auto it = other.find(tr.model.kept[i]);
    if (it == other.end()) continue;
    a.push_back(norm ? tr.model.examples[i].correct_norm() : tr.model.examples[i].correct());
    b.push_back(it->second);
  }
  Json j = paired_to_json(mcnemar(a, b));  // a = the model, b = the --compare model
  j["test"] = "exact McNemar (two-sided), acc of model vs the --compare model on the examples both scored";
  j["compare_only_correct"] = j["twin_only_correct"];
  j.erase("twin_only_correct");
  j["acc_diff_rule"] = "acc(model) - acc(compare)";
  return j;
}

// result["tasks"][name]: metrics, split, source; with --twin the twin's and McNemar's tests.
Json mc_task_json(const McOptions& o, const McTask& task, const TaskRun& tr) {
  const TaskScoring& sm = tr.model;
  Json tj = metrics_to_json(tr.model_metrics);
  tj["split"] = task.split;
  tj["source"] = task.source;
  if (is_bangla_task(task.name)) tj["group"] = "bangla";
  tj["boundary_mismatches"] = sm.boundary_mismatches;
  tj["truncated"] = sm.truncated;
  tj["skipped_too_long"] = static_cast<int64_t>(sm.skipped.size());
  if (!sm.skipped.empty()) {
    Json ids = Json::array();
    for (const auto& k : sm.skipped) ids.push_back(k.id);
    tj["skipped_ids"] = ids;
    tj["skipped_rule"] = "a continuation longer than the model's context cannot be scored (the harness refuses it): "
                         "the example is left out of n and of every metric; --strict stops instead";
  }
  if (!task.note.empty()) tj["note"] = task.note;
  if (task.acc_only) {
    for (const char* k : {"acc_norm", "acc_norm_stderr", "acc_bytes", "acc_bytes_stderr"}) tj.erase(k);
    tj["metrics"] = "acc only, as the harness reports this task";
  }
  if (tr.has_compare) {
    tj["compare"] = metrics_to_json(tr.compare_metrics);
    tj["compare"]["skipped_too_long"] = static_cast<int64_t>(tr.compare.skipped.size());
    tj["paired_compare_acc"] = paired_compare(tr, false);
    if (task.acc_only) {
      for (const char* k : {"acc_norm", "acc_norm_stderr", "acc_bytes", "acc_bytes_stderr"}) tj["compare"].erase(k);
    } else {
      tj["paired_compare_acc_norm"] = paired_compare(tr, true);
    }
  }
  if (!o.run.twin) return tj;
  const TaskScoring& st = tr.twin;
  std::vector<bool> a, b, an, bn;
  for (size_t i = 0; i < sm.examples.size(); ++i) {
    a.push_back(sm.examples[i].correct());
    b.push_back(st.examples[i].correct());
    an.push_back(sm.examples[i].correct_norm());
    bn.push_back(st.examples[i].correct_norm());
  }
  tj["twin"] = metrics_to_json(tr.twin_metrics);
  tj["paired_acc"] = paired_to_json(mcnemar(a, b));
  if (task.acc_only) {
    for (const char* k : {"acc_norm", "acc_norm_stderr", "acc_bytes", "acc_bytes_stderr"}) tj["twin"].erase(k);
  } else {
    tj["paired_acc_norm"] = paired_to_json(mcnemar(an, bn));
  }
  return tj;
}

// One --log-samples line per example: contexts, continuations, log-probs, predictions.
void log_mc_samples(const McOptions& o, const McTask& task, const TaskRun& tr, std::ofstream& samples) {
  const TaskScoring& sm = tr.model;
  const TaskScoring& st = tr.twin;
  size_t k = 0;
  for (size_t i = 0; i < sm.examples.size(); ++i) {
    const auto& ex = task.examples[sm.kept[i]];
    const auto& r = sm.examples[i];
    Json choices = Json::array();
    for (size_t c = 0; c < ex.contexts.size(); ++c, ++k) {
      Json cj = Json{{"context", ex.contexts[c]},
                     {"continuation", ex.continuations[c]},
                     {"context_tokens", static_cast<int64_t>(sm.requests[k].context.size())},
                     {"continuation_ids", sm.requests[k].continuation},
                     {"logprob", r.choices[c].logprob},
                     {"chars", r.choices[c].chars},
                     {"bytes", r.choices[c].bytes}};
      if (o.run.twin) cj["twin_logprob"] = st.examples[i].choices[c].logprob;
      choices.push_back(std::move(cj));
    }
    Json line = Json{{"task", task.name}, {"id", ex.id}, {"gold", ex.gold}, {"pred", r.pred},
                     {"pred_norm", r.pred_norm}, {"pred_bytes", r.pred_bytes}, {"choices", choices}};
    if (o.run.twin)
      line["twin_pred"] = st.examples[i].pred, line["twin_pred_norm"] = st.examples[i].pred_norm;
    samples << line.dump() << "\n";
  }
}

// result["groups"]["bangla"]: the Bangla tasks scored, their items and the mean of their acc
// (each task weighted by its items, as the harness's weight_by_size groups; the twin's and the
// --compare model's beside it).
void add_group_summary(Json& result) {
  double items = 0;
  std::map<std::string, double> sums;
  Json names = Json::array();
  for (const auto& [name, t] : result["tasks"].items()) {
    if (t.value("group", std::string()) != "bangla" || !t.contains("acc") || !t["acc"].is_number()) continue;
    const double n = static_cast<double>(t.value("n", int64_t{0}));
    names.push_back(name);
    items += n;
    sums["acc"] += n * t["acc"].get<double>();
    for (const char* who : {"twin", "compare"})
      if (t.contains(who) && t[who].contains("acc") && t[who]["acc"].is_number())
        sums[who] += n * t[who]["acc"].get<double>();
  }
  if (names.empty() || items == 0) return;
  Json g = {{"tasks", names}, {"n", static_cast<int64_t>(items)}, {"acc", sums["acc"] / items},
            {"rule", "acc averaged over the group's items (tasks weighted by size, as the harness's weight_by_size)"}};
  for (const char* who : {"twin", "compare"})
    if (sums.count(who)) g[std::string(who) + "_acc"] = sums[who] / items;
  result["groups"]["bangla"] = g;
}

}  // namespace

absl::StatusOr<Json> run_mc(const McOptions& given) {
  LM_ASSIGN_OR_RETURN(const std::vector<std::string> names, mc_task_names(given));
  Json missing = Json::object();
  LM_ASSIGN_OR_RETURN(std::vector<McTask> tasks, load_mc_tasks(given, names, missing));
  LM_ASSIGN_OR_RETURN(Models m, load_models(given.run));
  const auto& tok = m.run.tokenizer;
  McOptions o = given;
  LM_ASSIGN_OR_RETURN(const ContextPrefix start, context_prefix(tok, given.prefix));
  o.prefix = start.mode;
  const TokenIds& prefix = start.ids;
  Encoder encode = [&tok](std::string_view s) { return tok.encode(s); };
  Json result = mc_result_header(m, o, missing, given.prefix.empty());
  std::optional<CompareModel> compare;
  if (!o.run.compare.empty()) {
    LM_ASSIGN_OR_RETURN(Models cm, load_models(o.run, o.run.compare));
    LM_ASSIGN_OR_RETURN(ContextPrefix cp, context_prefix(cm.run.tokenizer, given.prefix));
    result["compare"] = compare_header(cm);
    result["compare"]["prefix"] = cp.mode;
    compare = CompareModel{std::move(cm), std::move(cp)};
  }
  std::ofstream samples;
  if (!o.log_samples.empty()) {
    samples.open(o.log_samples, std::ios::binary | std::ios::trunc);
    if (!samples) return absl::InternalError("--log-samples: cannot write " + o.log_samples);
  }
  // The overall ETA (issue 41): the work of a task is taken as the bytes of its requests' text.
  double total_bytes = 0, done_bytes = 0;
  for (const auto& task : tasks) total_bytes += task_bytes(task);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < tasks.size(); ++i) {
    const McTask& task = tasks[i];
    LM_ASSIGN_OR_RETURN(TaskRun tr, score_mc_task(m, o, task, encode, prefix, compare ? &*compare : nullptr));
    result["tasks"][task.name] = mc_task_json(o, task, tr);
    if (samples.is_open()) log_mc_samples(o, task, tr, samples);
    done_bytes += task_bytes(task);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log_info("%s: acc %.4f over %d examples; %s", task.name, tr.model_metrics.acc.mean, tr.model_metrics.n,
             Progress::line(absl::StrCat("overall: ", i + 1, " of ", tasks.size(), " tasks, prompt bytes"), done_bytes,
                            total_bytes, "B", 0, elapsed, i + 1 == tasks.size(), ""));
  }
  add_group_summary(result);
  if (samples.is_open()) {
    samples.close();
    log_info("wrote per-example log to %s", o.log_samples);
  }
  Json config = {{"data_dir", o.data_dir}, {"tasks", names}, {"limit", o.limit}, {"prefix", o.prefix},
                 {"twin", o.run.twin}};
  if (o.num_fewshot > 0) config["num_fewshot"] = o.num_fewshot;
  if (!o.run.compare.empty()) config["compare"] = o.run.compare;
  LM_RETURN_IF_ERROR(write_result(o.run, "mc", result, config,
                                  absl::StrCat(o.limit > 0 ? absl::StrCat(o.limit) : std::string("all"), "-", o.prefix)));
  return result;
}


}  // namespace lm::eval
