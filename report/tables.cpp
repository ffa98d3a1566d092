#include "report/tables.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "report/plot.h"

namespace lm::report {
namespace {

constexpr const char* kMissing = "–";

// j[key] when j is an object that has it, else null (the tables show "–"). A reference: loops
// over at(...).items() must not iterate a destroyed temporary.
const Json& at(const Json& j, const std::string& key) {
  static const Json kNull;
  return j.is_object() && j.contains(key) ? j[key] : kNull;
}

std::string td(const std::string& s, const std::string& cls = "") {
  return (cls.empty() ? "<td>" : "<td class=\"" + cls + "\">") + s + "</td>";
}

std::string header_row(const std::vector<std::string>& cols) {
  std::string s = "<tr>";
  for (const auto& c : cols) s += "<th>" + html_escape(c) + "</th>";
  return s + "</tr>\n";
}

std::string count(const Json& v) { return v.is_number() ? absl::StrFormat("%d", v.get<int64_t>()) : kMissing; }

// Which file of eval/ this is and why the report chose it (eval/evaluate.cpp writes "evaluation").
std::string evaluation_note(const Json& j) {
  const Json e = at(j, "evaluation");
  if (!e.is_object()) return "";
  return absl::StrFormat(" · file <code>eval/%s</code> (%s)", html_escape(e.value("file", std::string())),
                         html_escape(e.value("chosen", std::string())));
}

std::string nll_meta(const Json& j) {
  std::string s = absl::StrFormat("step %s · seq_len %s · stride %s · docs <b>%s</b>", count(at(j, "step")),
                                  count(at(j, "seq_len")), count(at(j, "stride")),
                                  html_escape(j.value("docs", std::string("?"))));
  if (j.contains("definition") && j["definition"].is_string()) s += " (" + html_escape(j["definition"].get<std::string>()) + ")";
  if (j.contains("source") && j["source"].is_string()) s += " · text <code>" + html_escape(j["source"].get<std::string>()) + "</code>";
  return "<p class=\"meta\">" + s + evaluation_note(j) + "</p>\n";
}

// An MC metric: flat in the task (lmeval's format), or under "model" (older files).
const Json& metric(const Json& task, const std::string& key) {
  if (task.contains(key)) return task[key];
  return at(at(task, "model"), key);
}

std::string mean_pm(const Json& task, const std::string& key) {
  const Json m = metric(task, key);
  if (!m.is_number()) return kMissing;
  const Json se = metric(task, key + "_stderr");
  if (!se.is_number()) return absl::StrFormat("%.4f", m.get<double>());
  return absl::StrFormat("%.4f <span class=\"se\">± %.4f</span>", m.get<double>(), se.get<double>());
}

// The direction of a paired test: model minus twin on that metric (the test's acc_diff, else the
// two means), 0 when unknown.
double paired_direction(const Json& task, const std::string& key, const std::string& metric_key) {
  const Json d = at(at(task, key), "acc_diff");
  if (d.is_number()) return d.get<double>();
  const Json m = metric(task, metric_key), t = at(at(task, "twin"), metric_key);
  return m.is_number() && t.is_number() ? m.get<double>() - t.get<double>() : 0.0;
}

// Holm's step-down correction of every p-value on the table (Holm 1979, "A simple sequentially
// rejective multiple test procedure"): with 18 tests on a page one raw p below 0.05 is expected by
// chance, so a cell is marked only when its adjusted p is below 0.05.
std::map<std::string, double> holm_adjusted(const Json& tasks) {
  std::vector<std::pair<double, std::string>> ps;
  for (const auto& [name, t] : tasks.items())
    for (const char* key : {"paired_acc", "paired_acc_norm"}) {
      const Json p = at(at(t, key), "p_value");
      if (p.is_number()) ps.emplace_back(p.get<double>(), name + "/" + key);
    }
  std::sort(ps.begin(), ps.end());
  std::map<std::string, double> adjusted;
  double running = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    running = std::max(running, std::min(1.0, static_cast<double>(ps.size() - i) * ps[i].first));
    adjusted[ps[i].second] = running;
  }
  return adjusted;
}

// The raw p; marked "win" (model better) or "loss" (model worse) when Holm's adjusted p < 0.05.
std::string p_value(const std::string& name, const Json& task, const std::string& key, const std::string& metric_key,
                    const std::map<std::string, double>& adjusted) {
  const Json p = at(at(task, key), "p_value");
  if (!p.is_number()) return td(kMissing);
  const auto it = adjusted.find(name + "/" + key);
  const bool significant = it != adjusted.end() && it->second < 0.05;
  const double dir = paired_direction(task, key, metric_key);
  const std::string cls = !significant || dir == 0 ? "" : dir > 0 ? "win" : "loss";
  return td(absl::StrFormat("%.3g", p.get<double>()), cls);
}

std::string mc_meta(const Json& j) {
  std::string s = absl::StrFormat("step %s · prefix <b>%s</b>", count(at(j, "step")),
                                  html_escape(j.value("prefix", std::string("?"))));
  if (j.value("limit", int64_t{0}) > 0) s += absl::StrFormat(" · first %d items per task", j["limit"].get<int64_t>());
  std::vector<std::string> missing;
  for (const auto& m : at(j, "missing")) missing.push_back(m.is_string() ? m.get<std::string>() : m.dump());
  if (!missing.empty()) s += " · no data for " + html_escape(absl::StrJoin(missing, ", "));
  // Examples too long for the model's context are not scored (lmeval mc, issue 30 item 2): n counts the rest.
  std::vector<std::string> too_long;
  for (const auto& [name, t] : at(j, "tasks").items())
    if (t.is_object() && t.value("skipped_too_long", int64_t{0}) > 0)
      too_long.push_back(absl::StrFormat("%s %d", name, t["skipped_too_long"].get<int64_t>()));
  if (!too_long.empty())
    s += " · not scored, longer than the model's context: " + html_escape(absl::StrJoin(too_long, ", ")) +
         " (n counts the scored)";
  s += " · p: exact two-sided McNemar test of model vs twin on the same items, raw; marked only where Holm's "
       "correction for the table's " + std::to_string(holm_adjusted(at(j, "tasks")).size()) +
       " tests leaves it below 0.05: <span class=\"win\">model better</span>, <span class=\"loss\">model worse</span>";
  return "<p class=\"meta\">" + s + evaluation_note(j) + "</p>\n";
}

}  // namespace

std::string fixed(const Json& v, int digits) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) return kMissing;
  return absl::StrFormat("%.*f", digits, v.get<double>());
}

const std::vector<std::string>& nll_columns() {
  static const std::vector<std::string> c = {"language",          "tokens",          "windows",
                                             "model nats/token",  "twin nats/token", "twin − model",
                                             "model bits/byte",   "twin bits/byte",  "perplexity",
                                             "bits/char"};
  return c;
}

const std::vector<std::string>& mc_columns() {
  static const std::vector<std::string> c = {"task",     "n",          "chance",        "acc",   "acc_norm",
                                             "twin acc", "acc − twin", "p (acc)", "p (acc_norm)", "split"};
  return c;
}

std::string nll_table_html(const Json& j) {
  std::string s = nll_meta(j) + "<table class=\"nll\">\n" + header_row(nll_columns());
  for (const auto& [lang, l] : at(j, "languages").items()) {
    const Json &m = at(l, "model"), &t = at(l, "twin"), &d = at(l, "twin_minus_model");
    Json diff = at(d, "nats_per_token");
    if (!diff.is_number() && at(t, "nats_per_token").is_number() && at(m, "nats_per_token").is_number())
      diff = t["nats_per_token"].get<double>() - m["nats_per_token"].get<double>();
    s += "<tr>" + td(html_escape(lang)) + td(count(at(m, "tokens"))) + td(count(at(l, "windows"))) +
         td(fixed(at(m, "nats_per_token"), 4), "key") + td(fixed(at(t, "nats_per_token"), 4)) + td(fixed(diff, 4)) +
         td(fixed(at(m, "bits_per_byte"), 4), "key") + td(fixed(at(t, "bits_per_byte"), 4)) +
         td(fixed(at(m, "perplexity"), 2)) + td(fixed(at(m, "bits_per_char"), 4)) + "</tr>\n";
  }
  return s + "</table>\n";
}

std::string mc_table_html(const Json& j) {
  // Two tables: the English tasks (and BEnQA), then the Bangla group (lmeval mc marks its tasks
  // "group": "bangla"); one Holm correction over both, as they are one evaluation.
  const std::map<std::string, double> adjusted = holm_adjusted(at(j, "tasks"));
  std::string rows[2];
  for (const auto& [name, t] : at(j, "tasks").items()) {
    const Json acc = metric(t, "acc"), twin = at(at(t, "twin"), "acc");
    const Json diff = acc.is_number() && twin.is_number() ? Json(acc.get<double>() - twin.get<double>()) : Json();
    const bool bangla = t.is_object() && t.value("group", std::string()) == "bangla";
    rows[bangla] += "<tr>" + td(html_escape(name)) + td(count(at(t, "n"))) + td(fixed(at(t, "chance"), 4)) +
                    td(mean_pm(t, "acc"), "key") + td(mean_pm(t, "acc_norm")) + td(fixed(twin, 4)) + td(fixed(diff, 4)) +
                    p_value(name, t, "paired_acc", "acc", adjusted) +
                    p_value(name, t, "paired_acc_norm", "acc_norm", adjusted) +
                    td(html_escape(t.value("split", std::string()))) + "</tr>\n";
  }
  std::string s = mc_meta(j);
  if (!rows[0].empty() || rows[1].empty()) s += "<table class=\"mc\">\n" + header_row(mc_columns()) + rows[0] + "</table>\n";
  if (!rows[1].empty())
    s += "<p class=\"meta\">Bangla tasks (lm-evaluation-harness 0.4.13 YAMLs)</p>\n<table class=\"mc\">\n" +
         header_row(mc_columns()) + rows[1] + "</table>\n";
  return s;
}

}  // namespace lm::report
