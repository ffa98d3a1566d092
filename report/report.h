// `lmtrain report`: one self-contained report.html per run (inline SVG, inline CSS, no network;
// Bengali text through the installed fonts, else the one it embeds: report/fonts.h) and PNG copies
// of the curves for READMEs.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace lm::report {

struct ReportResult {
  std::string html;               // path of report.html
  std::vector<std::string> pngs;  // paths of the PNG curves
  int64_t metric_rows = 0;
  std::vector<std::string> sections;  // titles of the sections that had data
};

// Reads runs/NAME/{config.json, metrics.jsonl, eval/nll.json, eval/mc.json,
// tokenizer/fertility.json (else the tokenizer folder the run recorded)} and writes
// `out_html` (default runs/NAME/report.html) and runs/NAME/plots/*.png.
absl::StatusOr<ReportResult> write_report(const std::string& run_dir, const std::string& out_html = "");

}  // namespace lm::report
