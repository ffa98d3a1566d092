// lmtrain extend-model: an HF checkpoint grown to the vocabulary of `lmtrain tokenizer --extend`
// (model/vocab_extension.h). Here: the base checkpoint's own tokenizer hash, which the extension
// must name, and the report.
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_join.h"
#include "app/commands.h"
#include "core/file.h"
#include "core/log.h"
#include "model/vocab_extension.h"
#include "tokenizer/tokenizer.h"

namespace lm::app {
namespace {

// The hash `lmtrain tokenizer --import HF_DIR` records (tokenizer/import_hf.cpp reads the same
// file): tokenizer.json when it is byte-level BPE, else tokenizer.model; "" without either.
absl::StatusOr<std::string> base_tokenizer_hash(const std::string& hf_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path json = fs::path(hf_dir) / "tokenizer.json", spm = fs::path(hf_dir) / "tokenizer.model";
  if (fs::exists(json, ec)) {
    LM_ASSIGN_OR_RETURN(std::string bytes, read_file(json.string()));
    if (tokenizer::Tokenizer::from_hf_json(bytes, json.string(), -1).ok() || !fs::exists(spm, ec))
      return tokenizer::model_hash(bytes);
  }
  if (fs::exists(spm, ec)) {
    LM_ASSIGN_OR_RETURN(std::string bytes, read_file(spm.string()));
    return tokenizer::model_hash(bytes);
  }
  log_warn("%s has no tokenizer.json or tokenizer.model: only the vocabulary size says the extension belongs to it",
           hf_dir);
  return std::string();
}

}  // namespace

void add_extend_model(CLI::App& app, Registry& reg) {
  static model::ExtendModelOptions o;
  auto* sub = app.add_subcommand("extend-model",
                                 "grow an HF checkpoint's embedding and head to an extended vocabulary "
                                 "(lmtrain tokenizer --extend)");
  sub->add_option("--hf", o.hf_dir, "the base HF checkpoint folder (config.json, safetensors)")->required();
  sub->add_option("--tokenizer", o.tokenizer_dir,
                  "the extended tokenizer folder (extension.json, hf-tokenizer.json or tokenizer.model)")->required();
  sub->add_option("--out", o.out, "the extended HF checkpoint folder to write")->required();
  sub->add_option("--seed", o.seed, "seed of the normal draws for new rows without base pieces")->capture_default_str();
  sub->add_flag("--force", o.force, "replace an existing --out folder");
  sub->footer(
      "New rows start as the mean of their base pieces' rows (fp32 mean, stored in the checkpoint's dtype);\n"
      "rows without pieces are drawn as transformers' resize_token_embeddings(mean_resizing=True) draws them.\n"
      "Old rows and every other tensor keep their bytes: logits on base-vocabulary text are unchanged.\n"
      "The extended tokenizer comes from `lmtrain tokenizer --extend`; train the result with\n"
      "`lmtrain fit --init-from OUT --set param_groups.embeddings_only_steps=500` (docs/continued-pretraining.md).\n"
      "Examples:\n"
      "  lmtrain extend-model --hf hf/Llama-3.2-1B --tokenizer tok-ext/ --out hf/Llama-3.2-1B-bn\n"
      "  lmtrain extend-model --hf hf/Qwen2-0.5B --tokenizer tok-qwen-ext/ --out hf/Qwen2-0.5B-bn --seed 7\n");
  add_global_flags(sub);
  reg.push_back({sub, [] {
                   LM_ASSIGN_OR_RETURN(o.base_tokenizer_hash, base_tokenizer_hash(o.hf_dir));
                   LM_ASSIGN_OR_RETURN(model::ExtendModelReport r, model::extend_hf_model(o));
                   std::printf("extended %s to %s: vocab %ld -> %ld (%s grown, %s): %ld new rows from their base pieces' "
                               "mean, %ld from the mean/covariance normal%s; %.1f MB of tensors\n",
                               o.hf_dir.c_str(), o.out.c_str(), r.base_vocab_size, r.vocab_size,
                               absl::StrJoin(r.grown, " and ").c_str(), r.dtypes.c_str(), r.from_pieces, r.from_normal,
                               r.covariance_pd ? "" : " (covariance not positive definite: the mean)",
                               r.bytes_written / 1e6);
                   return absl::OkStatus();
                 }});
}

}  // namespace lm::app
