// Hugging Face Llama export (`lmtrain export`); its reverse (`lmtrain fit --init-from`) is
// model/hf_import.h.
//
// Folder layout (what transformers' LlamaForCausalLM.from_pretrained and LlamaTokenizer read):
//   model.safetensors        our registered names are already HF names; tied: no lm_head.weight
//   config.json              LlamaConfig fields
//   generation_config.json   bos/eos/pad ids, greedy by default (no max_length: see export_hf)
//   tokenizer.model          the run's spm.model, byte for byte
//   tokenizer_config.json, special_tokens_map.json
//   README.md                model card (data, tokens, losses, eval tables)
// Rotary: lmforge uses HF's rotate_half layout (first half / second half of each head), so q_proj
// and k_proj are written unpermuted (docs/export.md; checked numerically by tests/export).
#pragma once

#include <string>

#include "core/config.h"
#include "model/config.h"
#include "model/hf_import.h"
#include "model/transformer.h"

namespace lm::model {

struct ExportOptions {
  std::string run_dir;
  int64_t step = -1;          // -1: the checkpoint `latest` points to
  std::string out;
  std::string dtype = "bf16"; // bf16 | fp32
  bool force = false;         // write over a non-empty `out`
  std::string license;        // the model card's license (a Hub id, e.g. apache-2.0); "" = unknown
};

struct ExportResult {
  std::string out, checkpoint;
  int64_t step = 0;
  int64_t params = 0;
  int64_t bytes = 0;  // model.safetensors size
};

// Special token ids and pieces, read from the run's tokenizer/tokenizer.json (defaults: the
// project's fixed ids unk 0, bos 1, eos 2, pad 3), and its framing's BOS (lm_model does not link
// the tokenizer library, so this is the second reader of tokenizer.json's "framing"; it follows
// tokenizer/tokenizer.h: a file without "framing" is the old text + eos, so no BOS).
struct SpecialTokens {
  int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = 3;
  std::string unk = "<unk>", bos = "<s>", eos = "</s>", pad = "<pad>";
  bool add_bos = true;  // framing.bos: add_bos_token of both exports, BOS in tokenizer.json's post-processor
};
absl::StatusOr<SpecialTokens> read_special_tokens(const std::string& tokenizer_json);

// LlamaConfig (Qwen2Config for architecture "qwen2") JSON for a model config; hf_model_config
// (model/hf_import.h) reads it back.
Json hf_config_json(const model::ModelConfig& cfg, const SpecialTokens& sp, const std::string& dtype);

absl::StatusOr<ExportResult> export_hf(const ExportOptions& opt);

// One sentence on what the export's dtype means for comparisons with lmeval on the run, whose
// checkpoint holds fp32 weights: bf16 (the default) rounds them, so scores on the export (transformers,
// lm-evaluation-harness) differ, and --dtype fp32 gives the run's own weights. The model card and
// `lmtrain export`'s last line print it (issue 30 item 4).
std::string precision_note(const std::string& dtype);

// Markdown tables of a run's eval/nll.json and eval/mc.json (layout: docs/eval.md "Result JSON"),
// as the model card and the demo's summary.md print them; every number is copied from the JSON
// (rounded to 4 decimals), nothing is recomputed. "" when the run has neither.
std::string eval_tables(const std::string& run_dir);

}  // namespace lm::model
