#include "app/eval_tables.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lm::app {
namespace {

std::string nll_header(const eval::NllOptions& o, const Json& r) {
  const bool harness = o.docs == "harness";
  std::string s = absl::StrFormat("NLL  run %s  step %d  seq_len %d  stride %d  docs %s (%s)\n", o.run.run,
                                  r.value("step", int64_t{0}), r.value("seq_len", int64_t{0}), o.stride, o.docs,
                                  harness ? "each document alone, EOS not scored: the harness's definition"
                                          : "stream as in training, EOS scored");
  absl::StrAppendFormat(&s, "%-6s %10s  %12s %10s %10s %10s", "lang", "tokens", "nats/token", "ppl", "bits/byte",
                        "bits/char");
  if (o.run.twin) absl::StrAppendFormat(&s, "  | %12s %10s %10s  | %10s", "twin nats/tok", "twin ppl", "bits/byte", "diff nats");
  if (!o.run.compare.empty())
    absl::StrAppendFormat(&s, "  | %13s %10s %10s %12s", "cmp nats/tok", "cmp b/byte", "diff b/byte", "diff b/txtbyte");
  return s + "\n";
}

// The --compare columns of one language: its nats/token and bits/byte, compare - model.
std::string compare_cells(const Json& l) {
  if (!l.contains("compare")) return "";
  const Json& c = l["compare"];
  const Json& d = l["compare_minus_model"];
  return absl::StrFormat("  | %13.4f %10.4f %+11.4f %12s", c.value("nats_per_token", 0.0), c.value("bits_per_byte", 0.0),
                         d.value("bits_per_byte", 0.0),
                         d.contains("bits_per_text_byte")
                             ? absl::StrFormat("%+.4f", d["bits_per_text_byte"].get<double>()) : std::string("-"));
}

// The header line that names the --compare model.
std::string compare_line(const Json& r) {
  if (!r.contains("compare")) return "";
  const Json& c = r["compare"];
  return absl::StrFormat("compare: %s (%s, step %d)\n", c.value("folder", std::string()),
                         c.value("kind_of_folder", std::string()), c.value("step", int64_t{0}));
}

// "0.2500±0.0433"; "-" for the norms of an acc-only task (their keys are absent) and for a task
// with nothing scored (null).
std::string mean_pm(const Json& m, const std::string& key) {
  if (!m.contains(key) || !m[key].is_number()) return "-";
  return absl::StrFormat("%.4f±%.4f", m[key].get<double>(), m.value(key + "_stderr", 0.0));
}

std::string p_value(const Json& task, const std::string& key) {
  if (!task.contains(key)) return "-";
  return absl::StrFormat("%.3g", task[key].value("p_value", 1.0));
}

}  // namespace

std::string nll_table(const eval::NllOptions& o, const Json& r) {
  std::string s = nll_header(o, r);
  for (const auto& [lang, l] : r.at("languages").items()) {
    const Json& m = l.at("model");
    absl::StrAppendFormat(&s, "%-6s %10d  %12.4f %10.2f %10.4f %10.4f", lang, m.value("tokens", int64_t{0}),
                          m.value("nats_per_token", 0.0), m.value("perplexity", 0.0), m.value("bits_per_byte", 0.0),
                          m.value("bits_per_char", 0.0));
    if (l.contains("twin")) {
      const Json& t = l["twin"];
      absl::StrAppendFormat(&s, "  | %12.4f %10.1f %10.4f  | %10.4f", t.value("nats_per_token", 0.0),
                            t.value("perplexity", 0.0), t.value("bits_per_byte", 0.0),
                            l["twin_minus_model"].value("nats_per_token", 0.0));
    }
    s += compare_cells(l) + "\n";
  }
  if (r.contains("compare"))
    s += compare_line(r) + "diff = compare - model; b/txtbyte: both over the same raw text bytes (--text scored "
         "whole), the figure that holds across tokenizers\n";
  return s;
}

namespace {

std::string mc_header(const eval::McOptions& o, const std::string& title) {
  std::string s = absl::StrFormat("%-20s %6s %8s %7s  %15s %15s %15s", title, "n", "too long", "chance", "acc",
                                  "acc_norm", "acc_bytes");
  if (o.run.twin) absl::StrAppendFormat(&s, "  | %15s %15s  %9s %9s", "twin acc", "twin acc_norm", "p(acc)", "p(norm)");
  if (!o.run.compare.empty())
    absl::StrAppendFormat(&s, "  | %15s %15s  %9s %9s", "cmp acc", "cmp acc_norm", "p(acc)", "p(norm)");
  return s + "  split\n";
}

std::string mc_row(const std::string& name, const Json& t) {
  std::string s = absl::StrFormat("%-20s %6d %8d %7.4f  %15s %15s %15s", name, t.value("n", int64_t{0}),
                                  t.value("skipped_too_long", int64_t{0}), t.value("chance", 0.0), mean_pm(t, "acc"),
                                  mean_pm(t, "acc_norm"), mean_pm(t, "acc_bytes"));
  if (t.contains("twin"))
    absl::StrAppendFormat(&s, "  | %15s %15s  %9s %9s", mean_pm(t["twin"], "acc"), mean_pm(t["twin"], "acc_norm"),
                          p_value(t, "paired_acc"), p_value(t, "paired_acc_norm"));
  if (t.contains("compare"))
    absl::StrAppendFormat(&s, "  | %15s %15s  %9s %9s", mean_pm(t["compare"], "acc"), mean_pm(t["compare"], "acc_norm"),
                          p_value(t, "paired_compare_acc"), p_value(t, "paired_compare_acc_norm"));
  return s + absl::StrFormat("  %s\n", t.value("split", std::string()));
}

// The group line under the Bangla table: acc over all its items, and the twin's / compare's.
std::string group_row(const Json& r) {
  if (!r.contains("groups") || !r["groups"].contains("bangla")) return "";
  const Json& g = r["groups"]["bangla"];
  std::string s = absl::StrFormat("%-20s %6d %8s %7s  %15.4f", "bangla (group)", g.value("n", int64_t{0}), "", "",
                                  g.value("acc", 0.0));
  if (g.contains("twin_acc")) absl::StrAppendFormat(&s, "   twin acc %.4f", g["twin_acc"].get<double>());
  if (g.contains("compare_acc")) absl::StrAppendFormat(&s, "   compare acc %.4f", g["compare_acc"].get<double>());
  return s + "   (acc over the group's items)\n";
}

}  // namespace

// Two tables: the English tasks and BEnQA, then the Bangla group (eval/tasks_bn.h) with its total.
std::string mc_table(const eval::McOptions& o, const Json& r) {
  std::string s = absl::StrFormat("MC  run %s  step %d  prefix %s%s%s\n", o.run.run, r.value("step", int64_t{0}),
                                  r.value("prefix", o.prefix), o.limit > 0 ? absl::StrCat("  limit ", o.limit) : "",
                                  o.num_fewshot > 0 ? absl::StrCat("  ", o.num_fewshot, "-shot") : "");
  const Json& tasks = r.at("tasks");
  std::string english, bangla;
  int64_t skipped = 0;
  for (const auto& name : eval::expand_tasks(o.tasks)) {
    if (!tasks.contains(name)) continue;  // no data: listed under "missing"
    const Json& t = tasks[name];
    skipped += t.value("skipped_too_long", int64_t{0});
    (t.value("group", std::string()) == "bangla" ? bangla : english) += mc_row(name, t);
  }
  if (!english.empty()) s += mc_header(o, "task") + english;
  if (!bangla.empty()) s += (english.empty() ? "" : "\n") + mc_header(o, "Bangla task") + bangla + group_row(r);
  if (skipped > 0)
    absl::StrAppendFormat(&s, "too long: %d examples not scored (a continuation longer than the model's context of "
                          "%d tokens; left out of n and the metrics; --strict stops instead)\n",
                          skipped, r.contains("model") ? r["model"].value("max_seq_len", int64_t{0}) : int64_t{0});
  if (r.contains("compare"))
    s += compare_line(r) + "p: exact two-sided McNemar on the items both models scored (not corrected for the "
         "number of tests)\n";
  return s;
}

}  // namespace lm::app
