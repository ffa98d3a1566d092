#include "report/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/run_folder.h"
#include "report/fonts.h"
#include "report/plot.h"
#include "report/tables.h"

namespace lm::report {
namespace fs = std::filesystem;
namespace {

// Plots: SVG in the page at this size (CSS scales it to its grid cell, two per row on a wide
// screen), PNG at twice that for READMEs (the same aspect, crisp when scaled down).
constexpr int kPlotW = 640, kPlotH = 320;
// Text samples: at most this many validation steps in the page (first, last, evenly between).
constexpr size_t kMaxSampleSteps = 12;

std::string cell(const Json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::fabs(d) >= 1000 ? absl::StrFormat("%.0f", d) : absl::StrFormat("%.4g", d);
  }
  if (v.is_string()) return html_escape(v.get<std::string>());
  if (v.is_null()) return "";
  return html_escape(v.dump());
}

// Rows of objects as a table with the `cols` that occur, in that order (the fertility table).
std::string json_table(const Json& rows, const std::vector<std::string>& cols_wanted, const std::string& cls) {
  std::vector<std::string> cols;
  for (const auto& c : cols_wanted)
    for (const auto& r : rows)
      if (r.is_object() && r.contains(c)) {
        cols.push_back(c);
        break;
      }
  std::string s = "<table class=\"" + cls + "\"><tr>";
  for (const auto& c : cols) s += "<th>" + html_escape(c) + "</th>";
  s += "</tr>\n";
  for (const auto& r : rows) {
    s += "<tr>";
    for (const auto& c : cols) s += "<td>" + (r.is_object() && r.contains(c) ? cell(r[c]) : std::string()) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

double num(const Json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN;
}

// Each validation language's series, connected (a line through the evaluations, dots on them),
// one colour per language in every plot.
std::map<std::string, Series> validation_series(const std::vector<Json>& metrics) {
  static const char* kValColors[] = {"#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  std::map<std::string, Series> val;
  for (const Json& m : metrics) {
    if (!m.contains("val_loss") || !m["val_loss"].is_object()) continue;
    for (auto& [lang, v] : m["val_loss"].items()) {
      Series& s = val[lang];
      s.name = "val " + lang;
      s.markers = true;
      if (s.color.empty()) s.color = kValColors[(val.size() - 1) % 5];
      s.x.push_back(num(m, "tokens")), s.y.push_back(v.get<double>());
    }
  }
  return val;
}

// Curves against tokens seen (the unit that compares runs with other batch sizes): file name and
// plot. Loss carries training and validation; validation alone is zoomed to its own range.
std::vector<std::pair<std::string, Plot>> training_plots(const std::vector<Json>& metrics) {
  Series train_loss{"train", {}, {}, "#9ab8d8"}, lr{"lr"}, gnorm{"grad norm"}, tps{"tokens/s"}, mfu{"mfu"};
  for (const Json& m : metrics) {
    const double x = num(m, "tokens");
    for (Series* s : {&train_loss, &lr, &gnorm, &tps, &mfu}) s->x.push_back(x);
    train_loss.y.push_back(num(m, "loss"));
    lr.y.push_back(num(m, "lr"));
    gnorm.y.push_back(num(m, "grad_norm"));
    tps.y.push_back(num(m, "tokens_per_s"));
    mfu.y.push_back(100 * num(m, "mfu"));
  }
  const std::map<std::string, Series> val = validation_series(metrics);
  Plot loss{"loss", "tokens seen", "nats/token", {train_loss}};
  Plot val_plot{"validation loss", "tokens seen", "nats/token", {}};
  for (auto& [lang, s] : val) loss.series.push_back(s), val_plot.series.push_back(s);
  std::vector<std::pair<std::string, Plot>> plots = {{"loss", loss}};
  if (!val.empty()) plots.push_back({"val_loss", val_plot});
  plots.push_back({"grad_norm", Plot{"gradient norm (before clipping)", "tokens seen", "L2 norm", {gnorm}}});
  plots.push_back({"lr", Plot{"learning rate", "tokens seen", "lr", {lr}}});
  plots.push_back({"throughput", Plot{"throughput", "tokens seen", "tok/s", {tps}}});
  plots.push_back({"mfu", Plot{"model FLOPs utilisation", "tokens seen", "MFU %", {mfu}}});
  return plots;
}

std::string html_head(const std::string& name) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lmforge run " + html_escape(name) + "</title>\n";
  // The installed Bengali fonts first, then the one the report embeds when it shows Bengali
  // (report/fonts.h), then Latin ones.
  h += "<style>body{font-family:'Noto Sans Bengali','Kalpurush','SolaimanLipi','Lohit Bengali','" +
       std::string(kEmbeddedBengaliFamily) + "','Noto Sans',sans-serif;max-width:1340px;"
       "margin:24px auto;padding:0 16px;color:#222}h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;border-bottom:"
       "1px solid #ddd;padding-bottom:4px;margin-top:32px}nav{font-size:13px;margin-bottom:12px}nav a{margin-right:12px}"
       "table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 10px;"
       "text-align:right;vertical-align:top}th{background:#f3f3f3;white-space:nowrap}td:first-child,th:first-child{"
       "text-align:left}td.key{font-weight:600}.win{font-weight:700;color:#1a7f37}.loss{font-weight:700;color:#b3261e}.se{color:#888;font-size:11px}"
       ".plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(600px,1fr));gap:16px}.plots figure{margin:0;"
       "border:1px solid #eee}.plots svg{width:100%;height:auto;display:block}.meta{color:#555;font-size:13px}"
       "table.samples td,table.samples th,table.mc td:last-child,table.mc th:last-child{text-align:left;max-width:560px}.config{columns:4 280px;font-size:12px;"
       "font-family:monospace}.config div{break-inside:avoid;padding:1px 0}.config span{color:#999}"
       "details{margin-top:8px;font-size:13px}table.samples td:first-child{white-space:nowrap}"
       ".prompt{color:#888}.nl{color:#bbb}table.summary td:first-child{color:#555}"
       "pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto}</style></head><body>\n";
  h += "<h1>lmforge run <code>" + html_escape(name) + "</code></h1>\n";
  h += "<nav><a href=\"#summary\">summary</a><a href=\"#curves\">curves</a><a href=\"#samples\">samples</a>"
       "<a href=\"#nll\">NLL</a><a href=\"#mc\">multiple choice</a><a href=\"#fertility\">tokenizer</a>"
       "<a href=\"#config\">config</a></nav>\n";
  return h;
}

// The numbers a reader looks for first: where the run is, its last losses, its speed.
std::string summary_section(const Json& cfg, const std::vector<Json>& metrics) {
  std::vector<std::pair<std::string, std::string>> rows;
  const Json planned = cfg.contains("train") ? cfg["train"].value("steps", Json()) : Json();
  if (!metrics.empty()) {
    const Json& last = metrics.back();
    rows.push_back({"steps", absl::StrFormat("%s of %s", cell(last.value("step", Json())), cell(planned))});
    rows.push_back({"tokens seen", cell(last.value("tokens", Json()))});
    rows.push_back({"last train loss", fixed(last.value("loss", Json()), 4) + " nats/token"});
    // Medians, never the best line: one interval on a busy machine swings MFU by 10x. The first
    // line (warm-up) is left out when there are others, as in fit's closing line.
    std::vector<double> rates, mfus, measured;
    for (size_t i = metrics.size() > 1 ? 1 : 0; i < metrics.size(); ++i) {
      const Json& m = metrics[i];
      if (std::isfinite(num(m, "tokens_per_s"))) rates.push_back(num(m, "tokens_per_s"));
      if (std::isfinite(num(m, "mfu"))) mfus.push_back(num(m, "mfu"));
      if (std::isfinite(num(m, "mfu_measured_peak"))) measured.push_back(num(m, "mfu_measured_peak"));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    if (!rates.empty()) rows.push_back({"median throughput", absl::StrFormat("%.0f tok/s", median(rates))});
    const double mfu = median(mfus), mfu_measured = median(measured);
    rows.push_back({"median MFU (mfu: against the data-sheet peak on a GPU, the measured ceiling on a CPU)",
                    mfu > 0 ? absl::StrFormat("%.1f%%", 100 * mfu) : "n/a (device peak unknown)"});
    if (mfu_measured > 0 && std::abs(mfu_measured - mfu) > 1e-9)
      rows.push_back({"median mfu_measured_peak (against the matmul ceiling measured at start-up)",
                      absl::StrFormat("%.1f%%", 100 * mfu_measured)});
  }
  for (const auto& [lang, s] : validation_series(metrics))
    rows.push_back({"last validation loss " + lang, absl::StrFormat("%.4f nats/token", s.y.back())});
  if (cfg.contains("model") && cfg["model"].is_object())
    rows.push_back({"model", absl::StrFormat("%s layers · d_model %s · vocab %s", cell(cfg["model"].value("n_layers", Json())),
                                             cell(cfg["model"].value("d_model", Json())),
                                             cell(cfg["model"].value("vocab_size", Json())))});
  std::string h = "<h2 id=\"summary\">Summary</h2>\n<table class=\"summary\">\n";
  for (const auto& [k, v] : rows) h += "<tr><td>" + html_escape(k) + "</td><td>" + v + "</td></tr>\n";
  return h + "</table>\n";
}

// The plots inline as SVG and as plots/NAME.png beside the report.
absl::Status curves_section(const RunFolder& run, const std::vector<Json>& metrics, ReportResult& r, std::string& h) {
  h += "<h2 id=\"curves\">Training curves</h2>\n";
  if (metrics.empty()) {
    h += "<p>metrics.jsonl is empty or missing: no curves yet.</p>\n";
    return absl::OkStatus();
  }
  r.sections.push_back("curves");
  h += "<div class=\"plots\">\n";
  std::error_code ec;
  fs::create_directories(run.plots(), ec);
  for (auto& [file, p] : training_plots(metrics)) {
    h += "<figure id=\"plot-" + file + "\">" + plot_svg(p, kPlotW, kPlotH) + "</figure>\n";
    const std::string png = (fs::path(run.plots()) / (file + ".png")).string();
    LM_RETURN_IF_ERROR(write_file_atomic(png, plot_png(p, 2 * kPlotW, 2 * kPlotH)));
    r.pngs.push_back(png);
  }
  h += "</div>\n";
  return absl::OkStatus();
}

// Which rows of samples.jsonl the page shows: all, or kMaxSampleSteps spread from first to last.
std::vector<size_t> shown_rows(size_t n) {
  std::vector<size_t> idx;
  if (n <= kMaxSampleSteps) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (size_t k = 0; k < kMaxSampleSteps; ++k) idx.push_back(k * (n - 1) / (kMaxSampleSteps - 1));
  return idx;
}

// Sample text for a table cell: escaped, each newline a visible grey ↵ (a text cell keeps one line
// per sample, where an early model's runs of newlines would make rows tall and empty).
std::string sample_text(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("<span class=\"nl\">↵</span>") : html_escape(std::string(1, c));
  return out;
}

// samples.jsonl (train/samples.h): one row per validation step, one column per prompt.
absl::Status samples_section(const RunFolder& run, ReportResult& r, std::string& h) {
  LM_ASSIGN_OR_RETURN(std::vector<Json> rows, read_metrics(run.samples()));
  h += "<h2 id=\"samples\">Text samples during training</h2>\n";
  if (rows.empty()) {
    h += "<p class=\"meta\">no samples.jsonl (train.eval.sample_tokens 0, no validation, or a run from before samples).</p>\n";
    return absl::OkStatus();
  }
  r.sections.push_back("samples");
  std::vector<std::string> names, prompts;
  double seconds = 0;
  int64_t tokens = 0;
  for (const Json& row : rows) {
    seconds += row.value("seconds", 0.0), tokens += row.value("new_tokens", int64_t{0});
    for (const Json& s : row.value("samples", Json::array()))
      if (std::find(names.begin(), names.end(), s.value("name", "")) == names.end())
        names.push_back(s.value("name", "")), prompts.push_back(s.value("prompt", ""));
  }
  const std::vector<size_t> shown = shown_rows(rows.size());
  h += absl::StrFormat(
      "<p class=\"meta\">greedy continuations of fixed prompts (grey) at each validation · %d of %d validations shown "
      "(all in samples.jsonl) · cost %d new tokens in %.2f s over the run</p>\n<table class=\"samples\"><tr><th>step</th>",
      shown.size(), rows.size(), tokens, seconds);
  for (const auto& n : names) h += "<th>" + html_escape(n) + "</th>";
  h += "</tr>\n";
  for (size_t i : shown) {
    h += "<tr><td>" + cell(rows[i].value("step", Json())) + "</td>";
    for (size_t k = 0; k < names.size(); ++k) {
      std::string text;
      for (const Json& s : rows[i].value("samples", Json::array()))
        if (s.value("name", "") == names[k]) text = s.value("completion", "");
      h += "<td><span class=\"prompt\">" + sample_text(prompts[k]) + "</span>" + sample_text(text) + "</td>";
    }
    h += "</tr>\n";
  }
  h += "</table>\n";
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
    if (!j.ok() || !j->contains("rows")) continue;
    r.sections.push_back("fertility");
    h += "<h2 id=\"fertility\">Tokenizer fertility</h2>\n";
    h += json_table((*j)["rows"],
                    {"encoder", "set", "lang", "texts", "tokens", "cp_per_token", "graphemes_per_token", "bytes_per_token",
                     "tokens_per_word", "split_word_share", "byte_fallback_rate", "unk_rate", "roundtrip_rate"},
                    "fertility");
    return;
  }
}

// nll.json and mc.json of eval/, when present, as fixed-column tables (report/tables.h).
void eval_sections(const RunFolder& run, ReportResult& r, std::string& h) {
  struct EvalSection {
    const char* file;
    const char* id;
    const char* title;
    std::string (*table)(const Json&);
  };
  for (const EvalSection& e : {EvalSection{"nll.json", "nll", "NLL per language, against the random-initialized twin", nll_table_html},
                               EvalSection{"mc.json", "mc", "Multiple-choice tasks", mc_table_html}}) {
    const fs::path p = fs::path(run.eval()) / e.file;
    if (!fs::exists(p)) continue;
    auto j = read_json_file(p.string());
    h += absl::StrFormat("<h2 id=\"%s\">%s</h2>\n", e.id, e.title);
    if (!j.ok()) {
      h += "<p>" + html_escape(j.status().ToString()) + "</p>\n";
      continue;
    }
    r.sections.push_back(e.id);
    h += e.table(*j);
  }
}

// The run's starts: one TensorBoard event file per start or resume, its name carrying the time
// (events.out.tfevents.<unix seconds>.<host>.<pid>.lmforge).
std::vector<std::string> start_times(const RunFolder& run) {
  std::vector<std::pair<long long, std::string>> starts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run.tensorboard(), ec)) {
    const std::string n = e.path().filename().string();
    const std::string tag = "events.out.tfevents.";
    if (n.rfind(tag, 0) != 0) continue;
    const long long secs = std::atoll(n.c_str() + tag.size());
    starts.push_back({secs, utc_time(static_cast<std::time_t>(secs))});
  }
  std::sort(starts.begin(), starts.end());
  std::vector<std::string> out;
  for (auto& [s, t] : starts) out.push_back(t);
  return out;
}

// Every scalar of the config as "section.sub.<b>key</b> value", in the file's order of sections.
void config_keys(const Json& j, const std::string& prefix, std::string& h) {
  for (const auto& [key, v] : j.items()) {
    if (v.is_object()) {
      config_keys(v, prefix + key + ".", h);
      continue;
    }
    h += "<div><span>" + html_escape(prefix) + "</span><b>" + html_escape(key) + "</b> " + cell(v) + "</div>";
  }
}

// config.json as it now stands: `lmtrain fit` rewrites it at a resume that changed it (a
// re-planned budget, new data), so this is the config of the last start, with the run's history.
std::string config_section(const RunFolder& run, const Json& cfg) {
  std::string h = "<h2 id=\"config\">Config (as of the last start or resume)</h2>\n";
  const std::vector<std::string> starts = start_times(run);
  std::error_code ec;
  const auto mtime = fs::last_write_time(run.config(), ec);
  std::string meta = "config.json";
  if (!ec) {
    const auto sys = std::chrono::time_point_cast<std::chrono::seconds>(
        mtime - fs::file_time_type::clock::now() + std::chrono::system_clock::now());
    meta += ", last written " + utc_time(std::chrono::system_clock::to_time_t(sys));
  }
  if (!starts.empty()) {
    meta += absl::StrFormat(" · %d start%s (%d resume%s): ", starts.size(), starts.size() == 1 ? "" : "s",
                            starts.size() - 1, starts.size() == 2 ? "" : "s");
    for (size_t i = 0; i < starts.size(); ++i) meta += (i ? ", " : "") + starts[i];
  }
  h += "<p class=\"meta\">" + html_escape(meta) + "</p>\n<div class=\"config\">";
  config_keys(cfg, "", h);
  return h + "</div>\n<details><summary>config.json</summary><pre>" + html_escape(cfg.dump(2)) + "</pre></details>\n";
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
  std::string h = html_head(name) + summary_section(cfg, metrics);
  LM_RETURN_IF_ERROR(curves_section(run, metrics, r, h));
  LM_RETURN_IF_ERROR(samples_section(run, r, h));
  eval_sections(run, r, h);
  fertility_section(run, cfg, r, h);
  h += config_section(run, cfg);
  h += "<p class=\"meta\">written by lmtrain report; self-contained (no scripts, no network).</p>\n</body></html>\n";
  // Bengali on the page: the font comes with it (a machine without one drew empty boxes).
  if (has_bengali(h)) h.insert(h.find("<style>") + 7, bengali_font_face());
  LM_RETURN_IF_ERROR(write_file_atomic(r.html, h));
  return r;
}

}  // namespace lm::report
