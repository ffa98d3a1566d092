// lmtrain tokenizer --sweep: tokenizer/sweep.h's rows plus what each vocabulary size costs in
// embedding (and untied output) parameters for each model preset.
#include "app/tokenizer_sweep.h"

#include <cstdio>

#include "core/file.h"
#include "model/config.h"
#include "tokenizer/sweep.h"

namespace lm::app {
namespace {

// Per preset: vocab * d_model for the embedding, twice when the output layer is untied.
Json embedding_costs(int64_t vocab) {
  Json emb = Json::object();
  for (const std::string& name : model::preset_names()) {
    model::ModelConfig c = *model::preset(name);
    c.vocab_size = vocab;
    const int64_t params = c.vocab_size * c.d_model * (c.tie_embeddings ? 1 : 2);
    emb[name] = {{"embedding_params", params},
                 {"share_of_model", static_cast<double>(params) / static_cast<double>(model::param_count(c))}};
  }
  return emb;
}

void print_costs(const Json& rows) {
  std::printf("\nembedding + output parameters (millions, share of the model) per preset\n%7s", "vocab");
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
                                 const tokenizer::ReportOptions& report, const std::vector<int64_t>& sizes,
                                 const std::string& out) {
  LM_ASSIGN_OR_RETURN(Json rows, tokenizer::sweep_vocab_sizes(sample, recipe, report, sizes, out));
  for (auto& r : rows) r["embedding"] = embedding_costs(r["vocab_size"].get<int64_t>());
  LM_RETURN_IF_ERROR(write_json_file(out + "/sweep.json", Json{{"recipe", to_json(recipe)}, {"rows", rows}}));
  std::printf("\n%s", tokenizer::format_sweep(rows).c_str());
  print_costs(rows);
  std::printf("sweep written to %s/sweep.json\n", out.c_str());
  return absl::OkStatus();
}

}  // namespace lm::app
