#include "tokenizer/sweep.h"

#include "absl/strings/str_format.h"
#include "core/log.h"

namespace lm::tokenizer {
namespace {

// cp/token of the SentencePiece row for (set, lang); 0 when the report has no such row.
double cp_per_token(const Json& report, const std::string& set, const std::string& lang) {
  for (const auto& r : report["rows"])
    if (r["encoder"] == "sentencepiece" && r["set"] == set && r["lang"] == lang) return r["cp_per_token"].get<double>();
  return 0;
}

Json sweep_row(int64_t vocab, const Json& report, double train_seconds) {
  double parity = 0;
  for (const auto& p : report["parity"])
    if (p["encoder"] == "sentencepiece") parity = p["bn_over_en"].get<double>();
  return {{"vocab_size", vocab},
          {"heldout_bn", cp_per_token(report, "heldout", "bn")},
          {"heldout_en", cp_per_token(report, "heldout", "en")},
          {"parallel_bn", cp_per_token(report, "parallel", "bn")},
          {"parallel_en", cp_per_token(report, "parallel", "en")},
          {"parity_bn_over_en", parity},
          {"encode_mb_per_s_1_thread", report["encode_mb_per_s"]["threads_1"]},
          {"train_seconds", train_seconds}};
}

}  // namespace

absl::StatusOr<Json> sweep_vocab_sizes(const TrainingSample& sample, const TrainOptions& recipe, ReportOptions report,
                                       const std::vector<int64_t>& sizes, const std::string& out) {
  report.print_table = false;
  Json rows = Json::array();
  for (int64_t vocab : sizes) {
    TrainOptions r = recipe;
    r.vocab_size = vocab;
    const std::string dir = absl::StrFormat("%s/vocab-%d", out, vocab);
    log_info("sweep: vocabulary %d -> %s", vocab, dir);
    TrainingSample s = sample;
    LM_ASSIGN_OR_RETURN(Tokenizer tok, train_tokenizer(sample, r, dir, &s.summary));
    LM_ASSIGN_OR_RETURN(Json rep, write_report(tok, s, r, report, dir));
    rows.push_back(sweep_row(vocab, rep, s.summary.seconds));
  }
  return rows;
}

std::string format_sweep(const Json& rows) {
  std::string s = absl::StrFormat(
      "vocabulary sweep (code points per token; parity = bn tokens / en tokens on the same sentences)\n"
      "%7s %9s %9s %9s %9s %7s %8s %8s\n",
      "vocab", "held bn", "held en", "par bn", "par en", "parity", "MB/s 1t", "train s");
  // A set the report did not have (no held-out text of a language, no --parallel) shows "-".
  auto cell = [](const Json& v, int width) {
    const double x = v.get<double>();
    return x > 0 ? absl::StrFormat("%*.3f", width, x) : absl::StrFormat("%*s", width, "-");
  };
  for (const auto& r : rows)
    s += absl::StrFormat("%7d %s %s %s %s %s %8.2f %8.0f\n", r["vocab_size"].get<int64_t>(), cell(r["heldout_bn"], 9),
                         cell(r["heldout_en"], 9), cell(r["parallel_bn"], 9), cell(r["parallel_en"], 9),
                         cell(r["parity_bn_over_en"], 7), r["encode_mb_per_s_1_thread"].get<double>(),
                         r["train_seconds"].get<double>());
  return s;
}

}  // namespace lm::tokenizer
