// lmtrain export: a run's checkpoint as a Hugging Face Llama folder (model/hf_export.h) or, with
// --format gguf, as one GGUF file for llama.cpp (model/gguf_export.h).
#include <cstdio>

#include "absl/strings/str_format.h"
#include "app/commands.h"
#include "core/log.h"
#include "model/gguf_export.h"
#include "model/hf_export.h"

namespace lm::app {

void add_export(CLI::App& app, Registry& reg) {
  static model::ExportOptions o;
  static std::string format = "hf", gguf_type = "f16";
  static bool skip_rope_permutation = false;
  static std::string gguf_tokenizer = "auto";
  auto* sub = app.add_subcommand("export", "write a run's checkpoint as a Hugging Face Llama folder or a GGUF file");
  sub->add_option("--run", o.run_dir, "run folder written by 'lmtrain fit'")->required();
  sub->add_option("--out", o.out, "output folder (hf: model.safetensors, config.json, ...) or file (gguf)")->required();
  sub->add_option("--format", format, "hf (Hugging Face folder) or gguf (one llama.cpp file)")
      ->check(CLI::IsMember({"hf", "gguf"}))->capture_default_str();
  sub->add_option("--gguf-type", gguf_type, "gguf weight type: f32, f16 or q8_0 (norms stay f32)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}))->capture_default_str();
  // Hidden: the negative control of tests/gguf/gguf_check.sh (llama.cpp must then disagree).
  sub->add_flag("--gguf-skip-rope-permutation", skip_rope_permutation)->group("");
  sub->add_option("--gguf-tokenizer", gguf_tokenizer,
                  "llama.cpp tokenizer of SentencePiece runs: t5 (Unigram, matches lmforge's), llama "
                  "(SentencePiece-BPE merges); auto: t5 for unigram spm models (an imported byte-level BPE is gpt2)")
      ->check(CLI::IsMember({"auto", "llama", "t5"}))->capture_default_str();
  sub->add_option("--step", o.step, "checkpoint step (default: latest)");
  sub->add_option("--dtype", o.dtype, "bf16 or fp32 weights (fp32: scores equal lmeval's on the run; bf16 differ by "
                  "up to ~0.1 nats per choice)")->capture_default_str();
  sub->add_option("--license", o.license,
                  "the model card's license, a Hub id such as apache-2.0 or mit (default: unknown; the data's terms "
                  "apply either way)");
  sub->add_flag("--force", o.force, "write over an existing output (a non-empty folder, or the .gguf file)");
  sub->footer(
      "Examples:\n"
      "  lmtrain export --run runs/demo --out hf/demo\n"
      "  lmtrain export --run runs/demo --step 400 --out hf/demo-400 --dtype fp32\n"
      "  lmtrain export --run runs/demo --format gguf --gguf-type q8_0 --out demo.q8_0.gguf\n"
      "  lmtrain export --run runs/cpt-1b --format gguf --out cpt-1b.f16.gguf   (a run of fit --init-from HF_DIR:\n"
      "      the checkpoint's architecture and its own tokenizer, extended or not; docs/continued-pretraining.md)\n"
      "Load with: AutoModelForCausalLM.from_pretrained('hf/demo'), or llama-cli -m demo.q8_0.gguf (docs/export.md).");
  add_global_flags(sub);
  reg.push_back({sub, [] {
                   if (format == "gguf") {
                     LM_ASSIGN_OR_RETURN(model::ExportResult r, model::export_gguf({o.run_dir, o.step, o.out, gguf_type, skip_rope_permutation, gguf_tokenizer, o.force}));
                     std::printf("exported step %ld of %s (%s params, %s, %.1f MB) to %s\n", r.step, r.checkpoint.c_str(),
                                 format_count(static_cast<double>(r.params)).c_str(), gguf_type.c_str(),
                                 r.bytes / 1e6, r.out.c_str());
                     return absl::OkStatus();
                   }
                   LM_ASSIGN_OR_RETURN(model::ExportResult r, model::export_hf(o));
                   std::printf("exported step %ld of %s (%s params, %s) to %s\n", r.step, r.checkpoint.c_str(),
                               format_count(static_cast<double>(r.params)).c_str(), o.dtype.c_str(), r.out.c_str());
                   std::printf("%s\n", model::precision_note(o.dtype).c_str());  // last: where users compare
                   return absl::OkStatus();
                 }});
}

}  // namespace lm::app
