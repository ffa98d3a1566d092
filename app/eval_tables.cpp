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
  return s + "\n";
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
    s += "\n";
  }
  return s;
}

std::string mc_table(const eval::McOptions& o, const Json& r) {
  std::string s = absl::StrFormat("MC  run %s  step %d  prefix %s%s\n", o.run.run, r.value("step", int64_t{0}),
                                  r.value("prefix", o.prefix),
                                  o.limit > 0 ? absl::StrCat("  limit ", o.limit) : "");
  absl::StrAppendFormat(&s, "%-14s %6s %8s %7s  %15s %15s %15s", "task", "n", "too long", "chance", "acc", "acc_norm",
                        "acc_bytes");
  if (o.run.twin) absl::StrAppendFormat(&s, "  | %15s %15s  %9s %9s", "twin acc", "twin acc_norm", "p(acc)", "p(norm)");
  s += "  split\n";
  const Json& tasks = r.at("tasks");
  int64_t skipped = 0;
  for (const auto& name : eval::expand_tasks(o.tasks)) {
    if (!tasks.contains(name)) continue;  // no data: listed under "missing"
    const Json& t = tasks[name];
    skipped += t.value("skipped_too_long", int64_t{0});
    absl::StrAppendFormat(&s, "%-14s %6d %8d %7.4f  %15s %15s %15s", name, t.value("n", int64_t{0}),
                          t.value("skipped_too_long", int64_t{0}), t.value("chance", 0.0), mean_pm(t, "acc"),
                          mean_pm(t, "acc_norm"), mean_pm(t, "acc_bytes"));
    if (t.contains("twin"))
      absl::StrAppendFormat(&s, "  | %15s %15s  %9s %9s", mean_pm(t["twin"], "acc"), mean_pm(t["twin"], "acc_norm"),
                            p_value(t, "paired_acc"), p_value(t, "paired_acc_norm"));
    absl::StrAppendFormat(&s, "  %s\n", t.value("split", std::string()));
  }
  if (skipped > 0)
    absl::StrAppendFormat(&s, "too long: %d examples not scored (a continuation longer than the model's context of "
                          "%d tokens; left out of n and the metrics; --strict stops instead)\n",
                          skipped, r.contains("model") ? r["model"].value("max_seq_len", int64_t{0}) : int64_t{0});
  return s;
}

}  // namespace lm::app
