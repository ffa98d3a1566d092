#include "report/report.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/file.h"
#include "core/run_folder.h"
#include "report/plot.h"

namespace lm::report {
namespace fs = std::filesystem;
namespace {

std::string cell(const Json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::fabs(d) >= 1000 ? absl::StrFormat("%.0f", d) : absl::StrFormat("%.4g", d);
  }
  if (v.is_string()) return html_escape(v.get<std::string>());
  if (v.is_null()) return "";
  return html_escape(v.dump());
}

// Any JSON as a table: an array of objects or an object of objects becomes rows with the union of
// their scalar keys as columns (first `prefer` keys first); other objects become key/value rows.
std::string json_table(const Json& j, const std::vector<std::string>& prefer = {}, const std::string& cls = "") {
  std::vector<std::pair<std::string, Json>> rows;
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) rows.emplace_back(std::to_string(i), j[i]);
  } else if (j.is_object()) {
    for (auto& [k, v] : j.items()) rows.emplace_back(k, v);
  }
  bool all_obj = !rows.empty();
  for (auto& [k, v] : rows) all_obj = all_obj && v.is_object();
  std::string s = "<table" + (cls.empty() ? std::string() : " class=\"" + cls + "\"") + ">";
  if (!all_obj) {
    s += "<tr><th>field</th><th>value</th></tr>";
    for (auto& [k, v] : rows) s += "<tr><td>" + html_escape(k) + "</td><td>" + cell(v) + "</td></tr>";
    return s + "</table>\n";
  }
  std::vector<std::string> cols;
  std::set<std::string> seen;
  for (const auto& p : prefer) {
    for (auto& [k, v] : rows)
      if (v.contains(p) && !seen.count(p)) cols.push_back(p), seen.insert(p);
  }
  if (prefer.empty()) {
    for (auto& [k, v] : rows)
      for (auto& [c, x] : v.items())
        if (!x.is_structured() && !seen.count(c)) cols.push_back(c), seen.insert(c);
  }
  s += "<tr><th></th>";
  for (auto& c : cols) s += "<th>" + html_escape(c) + "</th>";
  s += "</tr>";
  for (auto& [k, v] : rows) {
    s += "<tr><td>" + html_escape(j.is_array() ? "" : k) + "</td>";
    for (auto& c : cols) s += "<td>" + (v.contains(c) ? cell(v[c]) : std::string()) + "</td>";
    s += "</tr>";
  }
  return s + "</table>\n";
}

// Finds the part of an eval JSON that is a per-item table: the value under one of `keys`, or the
// document itself.
const Json& table_part(const Json& j, const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (j.contains(k) && (j[k].is_array() || j[k].is_object())) return j[k];
  return j;
}

std::string scalars_line(const Json& j) {
  std::string s;
  for (auto& [k, v] : j.items())
    if (!v.is_structured()) s += (s.empty() ? "" : " · ") + html_escape(k) + ": <b>" + cell(v) + "</b>";
  return s.empty() ? s : "<p class=\"meta\">" + s + "</p>\n";
}

double num(const Json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN;
}


// Curves against tokens seen (the unit that compares runs with other batch sizes): file name and plot.
std::vector<std::pair<std::string, Plot>> training_plots(const std::vector<Json>& metrics) {
  Series train_loss{"train"}, lr{"lr"}, tps{"tokens/s"}, mfu{"mfu"};
  std::map<std::string, Series> val;
  for (const Json& m : metrics) {
    const double x = num(m, "tokens");
    train_loss.x.push_back(x), train_loss.y.push_back(num(m, "loss"));
    lr.x.push_back(x), lr.y.push_back(num(m, "lr"));
    tps.x.push_back(x), tps.y.push_back(num(m, "tokens_per_s"));
    mfu.x.push_back(x), mfu.y.push_back(100 * num(m, "mfu"));
    if (m.contains("val_loss") && m["val_loss"].is_object()) {
      for (auto& [lang, v] : m["val_loss"].items()) {
        Series& s = val[lang];
        s.name = "val " + lang;
        s.dashed = true;
        s.markers = true;
        s.x.push_back(x), s.y.push_back(v.get<double>());
      }
    }
  }
  Plot loss{"loss", "tokens seen", "nats/token", {train_loss}};
  for (auto& [lang, s] : val) loss.series.push_back(s);
  return {
      {"loss", loss},
      {"lr", Plot{"learning rate", "tokens seen", "lr", {lr}}},
      {"throughput", Plot{"throughput", "tokens seen", "tok/s", {tps}}},
      {"mfu", Plot{"model FLOPs utilisation", "tokens seen", "MFU %", {mfu}}},
  };
}

std::string html_head(const std::string& name) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lmforge run " + html_escape(name) + "</title>\n";
  h += "<style>body{font-family:'Noto Sans Bengali','Kalpurush','SolaimanLipi','Noto Sans',sans-serif;max-width:1340px;"
       "margin:24px auto;padding:0 16px;color:#222}h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;"
       "padding-bottom:4px;margin-top:28px}table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid "
       "#ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}.plots{display:flex;"
       "flex-wrap:wrap;gap:12px}.meta{color:#555;font-size:13px}pre{background:#f7f7f7;padding:8px;font-size:12px;"
       "overflow:auto}</style></head><body>\n";
  h += "<h1>lmforge run <code>" + html_escape(name) + "</code></h1>\n";
  return h;
}

// The plots inline as SVG and as plots/NAME.png beside the report.
absl::Status curves_section(const RunFolder& run, const std::vector<Json>& metrics, ReportResult& r, std::string& h) {
  h += "<h2 id=\"curves\">Training curves</h2>\n";
  if (metrics.empty()) {
    h += "<p>metrics.jsonl is empty or missing: no curves yet.</p>\n";
  } else {
    r.sections.push_back("curves");
    h += "<div class=\"plots\">\n";
    std::error_code ec;
    fs::create_directories(run.plots(), ec);
    for (auto& [file, p] : training_plots(metrics)) {
      h += "<figure id=\"plot-" + file + "\">" + plot_svg(p) + "</figure>\n";
      const std::string png = (fs::path(run.plots()) / (file + ".png")).string();
      LM_RETURN_IF_ERROR(write_file_atomic(png, plot_png(p, 800, 400)));
      r.pngs.push_back(png);
    }
    h += "</div>\n";
  }
  return absl::OkStatus();
}

// Tokenizer fertility: the run's copy, else the tokenizer folder the run recorded.
void fertility_section(const RunFolder& run, const Json& cfg, ReportResult& r, std::string& h) {
  std::vector<fs::path> fert = {fs::path(run.tokenizer()) / "fertility.json"};
  if (cfg.contains("data") && cfg["data"].contains("tokenizer") && cfg["data"]["tokenizer"].is_string())
    fert.push_back(fs::path(cfg["data"]["tokenizer"].get<std::string>()) / "fertility.json");
  for (const auto& p : fert) {
    if (!fs::exists(p)) continue;
    auto j = read_json_file(p.string());
    if (!j.ok()) continue;
    r.sections.push_back("fertility");
    h += "<h2 id=\"fertility\">Tokenizer fertility</h2>\n" + scalars_line(*j);
    h += json_table(table_part(*j, {"rows"}),
                    {"encoder", "set", "lang", "texts", "tokens", "cp_per_token", "graphemes_per_token", "bytes_per_token",
                     "tokens_per_word", "split_word_share", "byte_fallback_rate", "unk_rate", "roundtrip_rate"},
                    "fertility");
    return;
  }
}

// Flattens {task: {model: {...}, twin: {...}, chance}} into columns model.acc, twin.acc, ...
Json flatten_rows(const Json& part) {
  Json flat = Json::object();
  if (part.is_object() || part.is_array()) {
    for (auto& [k, v] : part.items()) {
      Json row = Json::object();
      if (v.is_object()) {
        for (auto& [c, x] : v.items()) {
          if (x.is_object()) {
            for (auto& [c2, x2] : x.items())
              if (!x2.is_structured()) row[c + "." + c2] = x2;
          } else if (!x.is_structured()) {
            row[c] = x;
          }
        }
      } else {
        row["value"] = v;
      }
      flat[part.is_array() ? std::to_string(flat.size()) : k] = row;
    }
  }
  return flat;
}

// nll.json and mc.json of eval/, when present.
void eval_sections(const RunFolder& run, ReportResult& r, std::string& h) {
  struct EvalSection {
    const char* file;
    const char* id;
    const char* title;
    std::vector<std::string> keys;
  };
  for (const EvalSection& e : {EvalSection{"nll.json", "nll", "NLL against the random-initialized twin", {"languages", "langs", "results", "rows"}},
                               EvalSection{"mc.json", "mc", "Multiple-choice tasks (with chance level)", {"tasks", "results", "rows"}}}) {
    const fs::path p = fs::path(run.eval()) / e.file;
    if (!fs::exists(p)) continue;
    auto j = read_json_file(p.string());
    if (!j.ok()) {
      h += absl::StrFormat("<h2 id=\"%s\">%s</h2><p>%s</p>\n", e.id, e.title, html_escape(j.status().ToString()));
      continue;
    }
    r.sections.push_back(e.id);
    h += absl::StrFormat("<h2 id=\"%s\">%s</h2>\n", e.id, e.title) + scalars_line(*j);
    if (j->contains("evaluation") && (*j)["evaluation"].contains("file"))  // which of the run's evaluations
      h += absl::StrFormat("<p class=\"meta\">eval/%s: %s</p>\n",
                           html_escape((*j)["evaluation"]["file"].get<std::string>()),
                           html_escape((*j)["evaluation"].value("chosen", std::string())));
    const Json& part = table_part(*j, e.keys);
    h += json_table(flatten_rows(part), {}, e.id);
  }
}

}  // namespace

absl::StatusOr<ReportResult> write_report(const std::string& run_dir, const std::string& out_html) {
  const RunFolder run(run_dir);
  LM_ASSIGN_OR_RETURN(Json cfg, read_json_file(run.config()));
  LM_ASSIGN_OR_RETURN(std::vector<Json> metrics, read_metrics(run.metrics()));
  ReportResult r;
  r.html = out_html.empty() ? run.report() : out_html;
  r.metric_rows = static_cast<int64_t>(metrics.size());
  const fs::path dir(run_dir);
  const std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  std::string h = html_head(name);
  if (!metrics.empty()) {
    const Json& last = metrics.back();
    h += absl::StrFormat("<p class=\"meta\">%d logged steps · last step %s · %s tokens · last train loss %.4f nats/token</p>\n",
                         metrics.size(), last.value("step", Json()).dump(), last.value("tokens", Json()).dump(), num(last, "loss"));
  }
  LM_RETURN_IF_ERROR(curves_section(run, metrics, r, h));
  fertility_section(run, cfg, r, h);
  eval_sections(run, r, h);
  h += "<h2 id=\"config\">Resolved config</h2>\n<pre>" + html_escape(cfg.dump(2)) + "</pre>\n";
  h += "<p class=\"meta\">written by lmtrain report; self-contained (no scripts, no network).</p>\n</body></html>\n";
  LM_RETURN_IF_ERROR(write_file_atomic(r.html, h));
  return r;
}

}  // namespace lm::report
