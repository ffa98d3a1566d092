// lmtrain tokenizer --sweep 16000,32000,48000,64000: one tokenizer per vocabulary size on the same
// sample (into OUT/vocab-N/, each a complete tokenizer folder with its fertility.json), then one
// table: Bangla and English code points per token on the held-out and parallel text, the bn/en
// parity, encode speed, and what each size costs in embedding parameters for each model preset.
#include "app/tokenizer_sweep.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/log.h"
#include "model/config.h"

namespace lm::app {
namespace {

// cp/token of the SentencePiece row for (set, lang); 0 when the report has no such row.
double cp_per_token(const Json& report, const std::string& set, const std::string& lang) {
  for (const auto& r : report["rows"])
    if (r["encoder"] == "sentencepiece" && r["set"] == set && r["lang"] == lang) return r["cp_per_token"].get<double>();
  return 0;
}

// The report's fields the sweep table shows, per vocabulary size.
Json sweep_row(int64_t vocab, const Json& report, double train_seconds) {
  double parity = 0;
  for (const auto& p : report["parity"])
    if (p["encoder"] == "sentencepiece") parity = p["bn_over_en"].get<double>();
  Json emb = Json::object();
  for (const std::string& name : model::preset_names()) {
    model::ModelConfig c = *model::preset(name);
    c.vocab_size = vocab;
    const int64_t params = c.vocab_size * c.d_model * (c.tie_embeddings ? 1 : 2);
    emb[name] = {{"embedding_params", params},
                 {"share_of_model", static_cast<double>(params) / static_cast<double>(model::param_count(c))}};
  }
  return {{"vocab_size", vocab},
          {"heldout_bn", cp_per_token(report, "heldout", "bn")},
          {"heldout_en", cp_per_token(report, "heldout", "en")},
          {"parallel_bn", cp_per_token(report, "parallel", "bn")},
          {"parallel_en", cp_per_token(report, "parallel", "en")},
          {"parity_bn_over_en", parity},
          {"encode_mb_per_s_1_thread", report["encode_mb_per_s"]["threads_1"]},
          {"train_seconds", train_seconds},
          {"embedding", emb}};
}

void print_sweep(const Json& rows) {
  std::printf("\nvocabulary sweep (cp/token = code points per token; parity = bn tokens / en tokens on the same "
              "sentences)\n%7s %9s %9s %9s %9s %7s %8s %8s\n",
              "vocab", "held bn", "held en", "par bn", "par en", "parity", "MB/s 1t", "train s");
  for (const auto& r : rows)
    std::printf("%7ld %9.3f %9.3f %9.3f %9.3f %7.3f %8.2f %8.0f\n", static_cast<long>(r["vocab_size"].get<int64_t>()),
                r["heldout_bn"].get<double>(), r["heldout_en"].get<double>(), r["parallel_bn"].get<double>(),
                r["parallel_en"].get<double>(), r["parity_bn_over_en"].get<double>(),
                r["encode_mb_per_s_1_thread"].get<double>(), r["train_seconds"].get<double>());
  std::printf("\nembedding + output parameters (M, share of the model) per preset\n%7s", "vocab");
  for (const std::string& name : model::preset_names()) std::printf(" %16s", name.c_str());
  std::printf("\n");
  for (const auto& r : rows) {
    std::printf("%7ld", static_cast<long>(r["vocab_size"].get<int64_t>()));
    for (const std::string& name : model::preset_names()) {
      const auto& e = r["embedding"][name];
      std::printf(" %8.1fM %5.1f%%", e["embedding_params"].get<int64_t>() / 1e6,
                  100 * e["share_of_model"].get<double>());
    }
    std::printf("\n");
  }
}

}  // namespace

absl::Status run_tokenizer_sweep(const tokenizer::TrainingSample& sample, const tokenizer::TrainOptions& recipe,
                                 tokenizer::ReportOptions report, const std::vector<int64_t>& sizes,
                                 const std::string& out) {
  report.print_table = false;
  Json rows = Json::array();
  for (int64_t vocab : sizes) {
    tokenizer::TrainOptions r = recipe;
    r.vocab_size = vocab;
    const std::string dir = absl::StrFormat("%s/vocab-%d", out, vocab);
    log_info("sweep: vocabulary %d -> %s", vocab, dir);
    tokenizer::SampleSummary summary = sample.summary;
    LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::train_tokenizer(sample, r, dir, &summary));
    tokenizer::TrainingSample s = sample;
    s.summary = summary;
    LM_ASSIGN_OR_RETURN(Json rep, tokenizer::write_report(tok, s, r, report, dir));
    rows.push_back(sweep_row(vocab, rep, summary.seconds));
  }
  LM_RETURN_IF_ERROR(write_json_file(out + "/sweep.json", Json{{"recipe", to_json(recipe)}, {"rows", rows}}));
  print_sweep(rows);
  std::printf("sweep written to %s/sweep.json\n", out.c_str());
  return absl::OkStatus();
}

}  // namespace lm::app
