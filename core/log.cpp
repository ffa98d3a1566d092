#include "core/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace lm {

OutputOptions& output_options() {
  static OutputOptions opts;
  return opts;
}

void init_output(bool quiet, bool verbose) {
  auto& o = output_options();
  o.quiet = quiet;
  o.verbose = verbose;
  const char* ci = std::getenv("CI");
  const bool in_ci = ci != nullptr && std::string(ci) != "" && std::string(ci) != "false";
  o.interactive = !in_ci && ::isatty(STDERR_FILENO) == 1;
}

bool detail_enabled() {
  const auto& o = output_options();
  return o.verbose && !o.quiet;
}

void log_line(const std::string& level, const std::string& msg) {
  std::time_t t = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%H:%M:%S", std::localtime(&t));
  std::fprintf(stderr, "[%s %s] %s\n", ts, level.c_str(), msg.c_str());
  std::fflush(stderr);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%ldh%02ldm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%ldm%02lds", s / 60, s % 60);
  return absl::StrFormat("%lds", s);
}

std::string format_count(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2fB", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  if (v >= 10 || v == 0) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.2f", v);  // slow rates (0.25 steps/s) must not print as 0
}

Progress::Progress(std::string label, double total, std::string unit, double start)
    : label_(std::move(label)), total_(total), unit_(std::move(unit)), start_done_(start) {
  start_ = last_print_ = std::chrono::steady_clock::now();
}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(double done, const std::string& extra) {
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  // Terminals refresh 4x a second; logs get a line every 10 s so CI output stays short.
  const double every = output_options().interactive ? 0.25 : 10.0;
  if (printed_ && since < every) return;
  last_print_ = now;
  printed_ = true;
  print(done, extra, false);
}

void Progress::finish(const std::string& extra) { print(total_, extra, true); }

std::string Progress::line(const std::string& label, double done, double total, const std::string& unit,
                           double start, double el, bool final_line, const std::string& extra) {
  const double rate = el > 0 ? (done - start) / el : 0;
  const double pct = total > 0 ? 100.0 * done / total : 0;
  const double eta = rate > 0 ? (total - done) / rate : -1;
  std::string line = absl::StrFormat("%s %5.1f%% %s/%s %s %s %s/s", label, pct, format_count(done),
                                     format_count(total), unit, format_count(rate), unit);
  line += final_line ? absl::StrFormat(" in %s", format_duration(el))
                     : absl::StrFormat(" ETA %s", format_duration(eta));
  if (!extra.empty()) line += " | " + extra;
  return line;
}

void Progress::print(double done, const std::string& extra, bool final_line) {
  if (output_options().quiet) return;
  const std::string line = Progress::line(label_, done, total_, unit_, start_done_, elapsed_s(), final_line, extra);
  if (output_options().interactive) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
    std::fflush(stderr);
  } else {
    log_line("info", line);
  }
}

std::string utc_time(std::time_t t) {
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string host_name(const std::string& fallback) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return fallback;
  return host;
}

}  // namespace lm
