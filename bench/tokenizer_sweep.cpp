// The vocabulary sweep of `lmtrain tokenizer --sweep` without LibTorch (issue 31.3): the same
// library calls (build_sample, then tokenizer/sweep.h: train_tokenizer + write_report per size into
// OUT/vocab-N/), for a machine or a build that has only lm_tokenizer. lmtrain's sweep prints the
// same rows plus the embedding parameters per model preset. One size = one plain tokenizer folder.
//   tokenizer_sweep --corpus data/shared-corpus.json --out /tmp/sweep --sizes 16000,32000 [--threads 2]
//                   [--parallel FILE --parallel-corpora A:B,..] [--eval-text LANG=FILE ...]
//                   [--vocab-allocation joint|per-language] [--language-vocab bn:0.6,en:0.4] [--fill ...]
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "tokenizer/sweep.h"

namespace {

absl::Status run(const std::string& corpus, const std::string& out, const std::vector<int64_t>& sizes,
                 const lm::tokenizer::TrainOptions& recipe, const lm::tokenizer::ReportOptions& report) {
  LM_ASSIGN_OR_RETURN(lm::data::CorpusManifest m, lm::data::load_manifest(corpus));
  LM_ASSIGN_OR_RETURN(lm::tokenizer::TrainingSample sample, lm::tokenizer::build_sample(m, recipe));
  for (const auto& l : sample.summary.languages)
    lm::log_info("  %-4s %s chars (%.1f%% of the sample, weights ask %.1f%%)", l.lang,
                 lm::format_count(static_cast<double>(l.chars)), 100 * l.char_share, 100 * l.weight_share);
  LM_ASSIGN_OR_RETURN(lm::Json rows, lm::tokenizer::sweep_vocab_sizes(sample, recipe, report, sizes, out));
  LM_RETURN_IF_ERROR(lm::write_json_file(out + "/sweep.json", lm::Json{{"recipe", lm::to_json(recipe)}, {"rows", rows}}));
  std::printf("%s", lm::tokenizer::format_sweep(rows).c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenizers of several vocabulary sizes on one sample, compared (lmtrain tokenizer --sweep)"};
  std::string corpus, out;
  std::vector<int64_t> sizes;
  lm::tokenizer::TrainOptions r;
  lm::tokenizer::ReportOptions p;
  app.add_option("--corpus", corpus, "corpus manifest")->required();
  app.add_option("--out", out, "output folder (OUT/vocab-N/, OUT/sweep.json)")->required();
  app.add_option("--sizes", sizes, "vocabulary sizes")->delimiter(',')->required();
  app.add_option("--threads", r.threads, "trainer and encoder threads (0 = all)");
  app.add_option("--parallel", p.parallel, "parallel JSONL {bn, en} (.gz ok)");
  app.add_option("--parallel-corpora", p.parallel_corpora, "corpus:split filters")->delimiter(',');
  app.add_option("--eval-text", p.eval_texts, "LANG=FILE, reported as eval:<file name>");
  app.add_option("--vocab-allocation", r.vocab_allocation, "joint or per-language");
  app.add_option("--language-vocab", r.language_vocab, "bn:0.6,en:0.4");
  app.add_option("--fill", r.fill, "same-language, other-languages or none");
  CLI11_PARSE(app, argc, argv);
  const absl::Status st = run(corpus, out, sizes, r, p);
  if (!st.ok()) {
    std::fprintf(stderr, "tokenizer_sweep: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
