// lmtrain export: a run's checkpoint as a Hugging Face Llama folder (train/hf_export.h).
#include <cstdio>

#include "absl/strings/str_format.h"
#include "app/commands.h"
#include "core/log.h"
#include "train/hf_export.h"

namespace lm::app {

void add_export(CLI::App& app, Registry& reg) {
  static train::ExportOptions o;
  auto* sub = app.add_subcommand("export", "write a run's checkpoint as a Hugging Face Llama folder");
  sub->add_option("--run", o.run_dir, "run folder written by 'lmtrain fit'")->required();
  sub->add_option("--out", o.out, "output folder (model.safetensors, config.json, tokenizer.model, ...)")->required();
  sub->add_option("--step", o.step, "checkpoint step (default: latest)");
  sub->add_option("--dtype", o.dtype, "bf16 or fp32 weights")->capture_default_str();
  sub->footer(
      "Examples:\n"
      "  lmtrain export --run runs/demo --out hf/demo\n"
      "  lmtrain export --run runs/demo --step 400 --out hf/demo-400 --dtype fp32\n"
      "Load with: LlamaForCausalLM.from_pretrained('hf/demo') (docs/export.md).");
  add_global_flags(sub);
  reg.push_back({sub, [] {
                   LM_ASSIGN_OR_RETURN(train::ExportResult r, train::export_hf(o));
                   std::printf("exported step %ld of %s (%s params, %s) to %s\n", r.step, r.checkpoint.c_str(),
                               format_count(static_cast<double>(r.params)).c_str(), o.dtype.c_str(), r.out.c_str());
                   return absl::OkStatus();
                 }});
}

}  // namespace lm::app
