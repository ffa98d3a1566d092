// lmtrain report: runs/NAME/report.html (inline SVG) + runs/NAME/plots/*.png.
#include <cstdio>

#include "app/commands.h"
#include "report/report.h"

namespace lm::app {

void add_report(CLI::App& app, Registry& reg) {
  static std::string run, out;
  auto* sub = app.add_subcommand("report", "write report.html (curves, fertility, eval tables, config) for a run");
  sub->add_option("--run", run, "run folder written by 'lmtrain fit'")->required();
  sub->add_option("--out", out, "HTML path (default: RUN/report.html)");
  sub->footer("Example:\n  lmtrain report --run runs/demo && xdg-open runs/demo/report.html");
  add_global_flags(sub);
  reg.push_back({sub, [] {
                   LM_ASSIGN_OR_RETURN(report::ReportResult r, report::write_report(run, out));
                   std::printf("report: %s (%ld metric rows", r.html.c_str(), r.metric_rows);
                   for (const auto& s : r.sections) std::printf(", %s", s.c_str());
                   std::printf(")\n");
                   for (const auto& p : r.pngs) std::printf("  %s\n", p.c_str());
                   return absl::OkStatus();
                 }});
}

}  // namespace lm::app
