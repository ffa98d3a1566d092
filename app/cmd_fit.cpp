// lmtrain fit: pretrain on prepared shards. The flags become train::FitOptions; train::set_up_run
// makes every decision (resume mode, config precedence, device, tokenizer, data); this file prints.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "app/fit_flags.h"
#include "core/log.h"
#include "runtime/runtime.h"
#include "train/distributed.h"
#include "train/run_setup.h"

namespace lm::app {
namespace {

absl::Status run_fit(const train::FitOptions& opts, const std::string& resume) {
  train::FitOptions o = opts;
  LM_ASSIGN_OR_RETURN(o.resume, train::parse_resume_mode(resume));
  o.threads = global_options().threads;
  // From here on SIGINT/SIGTERM only set a flag: the loop finishes its step and checkpoints.
  install_stop_handlers();
  LM_ASSIGN_OR_RETURN(std::unique_ptr<train::RunSetup> s, train::set_up_run(o));
  const bool talks = s->req.rank == 0;
  if (s->finished) {
    if (talks)
      std::printf("%s: the run is finished (step %lld of %lld); nothing to train. Extend it with a larger --steps "
                  "or --tokens (re-plans the schedule)\n",
                  o.out.c_str(), static_cast<long long>(s->done_step), static_cast<long long>(s->req.train.steps));
    return absl::OkStatus();
  }
  LM_ASSIGN_OR_RETURN(train::FitSummary sum, train::fit(s->req, *s->source, s->val));
  if (talks) std::printf("%s\n", sum.summary().c_str());
  const auto& val = s->val;
  if (talks && !sum.val_loss.empty() && !val.empty() && !val.begin()->second.empty())  // docs/eval.md
    std::printf("  (val loss: the first %zu windows of %zu tokens per language; 'lmeval nll' scores every "
                "validation token, in windows of %ld: its figures differ)\n",
                val.begin()->second.size(), val.begin()->second.front().size() - 1,
                static_cast<long>(s->req.model.max_seq_len));
  if (sum.stop_signal != 0) global_options().exit_code = 128 + sum.stop_signal;
  return absl::OkStatus();
}

}  // namespace

void add_fit(CLI::App& app, Registry& reg) {
  static train::FitOptions o;
  static std::string resume;
  static int nproc = 0;  // read by maybe_launch_fit before parsing; bound here for --help and validation
  auto* sub = app.add_subcommand("fit", "pretrain a model on prepared token shards");
  sub->add_option("--data", o.data, "shards folder written by 'lmtrain prepare' (on --resume: the run's own by default)");
  sub->add_option("--out", o.out, "run folder (config.json, metrics.jsonl, checkpoints/)")->required();
  sub->add_option("--preset", o.preset, "model preset: tiny, small, 124m, 400m, 1b (default small; --resume keeps the run's)");
  sub->add_option("--config", o.config, "JSON file {\"model\": {...}, \"train\": {\"optimizer\": {...}, ...}} over the preset");
  sub->add_option("--tokenizer", o.tokenizer, "tokenizer folder (default: the one recorded by prepare)");
  sub->add_option("--init-from", o.init_from, "start from a Hugging Face checkpoint folder (LlamaForCausalLM: Llama 2/3/3.1/3.2, Qwen2ForCausalLM; "
                  "or an 'lmtrain export'): the run's model is the folder's config.json, its weights the folder's");
  sub->add_option("--resume", resume,
                  "continue the run with its own config.json from its latest checkpoint (step 0 if none); flags that "
                  "would change the run are refused, a larger --steps/--tokens re-plans the schedule. '--resume "
                  "auto': the same, or start the run when the folder holds none yet (new, empty, or killed before "
                  "its config.json): one command for a restart loop")
      ->expected(0, 1)
      ->default_str("yes")
      ->type_name("[auto]");
  sub->add_flag("--allow-new-data", o.allow_new_data,
                "with --resume and another --data: continued pretraining on new shards (same tokenizer), keeping "
                "weights, optimizer state and step; the data order starts fresh");
  sub->add_flag("--force", o.force, "start over in an existing run folder (deletes its checkpoints)");
  add_train_flags(sub, o.flags);
  sub->add_option("--nproc", nproc, "data-parallel ranks on this machine (or launch with torchrun/srun)");
  sub->add_option("--dist-timeout", o.dist_timeout_s, "seconds before a collective gives up")->capture_default_str();
  sub->add_flag("--ddp-post-backward", o.ddp_post_backward,
                "all-reduce gradients after backward instead of overlapped with it (train.distributed.overlap=false)");
  sub->footer(
      "Examples:\n"
      "  lmtrain fit --data shards/ --preset small --out runs/small --steps 600\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m   # GPU: cuda, bf16, TF32, the preset's batch/lr\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m --tokens 2e9 --micro-batch 8   # flags win\n"
      "  lmtrain fit --data shards/ --preset tiny --out runs/wsd --set schedule.kind=wsd --set optimizer.beta2=0.99\n"
      "  lmtrain fit --out runs/small --resume                    # after a kill: the run's own settings\n"
      "  lmtrain fit --data shards/ --preset 400m --out runs/400m --resume auto   # the same command starts or continues\n"
      "  lmtrain fit --out runs/small --resume --steps 1200       # extend a run (re-plans the lr schedule)\n"
      "  lmtrain fit --out runs/small --resume --data shards-v2/ --allow-new-data --steps 2000   # continued pretraining\n"
      "  lmtrain fit --data shards/ --init-from hf/Llama-3.2-1B --out runs/cpt   # continued pretraining of a checkpoint\n"
      "  lmtrain fit --data shards-bn/ --init-from hf/Llama-3.2-1B-bn --out runs/bn --set param_groups.embeddings_only_steps=500 \\\n"
      "      --set param_groups.rewarmup_steps=100 \\\n"
      "      --set param_groups.embeddings_lr_scale=2   # extended vocabulary: embeddings and head first, then all\n"
      "  lmtrain fit --data shards/ --preset tiny --out runs/dp --nproc 2   # 2 ranks, Gloo\n"
      "  torchrun --no-python --nproc-per-node 8 lmtrain fit --data shards/ --preset 400m --out runs/400m\n"
      "Defaults: --device auto (cuda when visible), --dtype auto (bf16 on cuda), TF32 on; each preset's batch,\n"
      "lr, warmup and checkpoint period are in docs/gpu.md ('Preset defaults'); 'lmtrain plan' prints them.\n"
      "Signals: SIGINT/SIGTERM stop within one micro-batch (the step in flight is dropped and redone on resume),\n"
      "checkpoint the last complete step and exit 130/143.\n"
      "One writer per --out: a second fit on a run folder is refused naming the holder (RUN/run.lock, exit 1).\n"
      "--resume takes the newest checkpoint whose checksums verify; damaged newer ones are set aside (step-N.damaged).");
  add_global_flags(sub);
  reg.push_back({sub, [] { return run_fit(o, resume); }});
}

int maybe_launch_fit(int argc, char** argv) {
  // `lmtrain fit ... --nproc N`: this process becomes the launcher of N ranks.
  int nproc = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--nproc") nproc = std::atoi(argv[i + 1]);
  }
  if (nproc <= 1 || std::getenv("WORLD_SIZE") != nullptr) return -1;
  const char* port = std::getenv("MASTER_PORT");
  return train::launch_local_ranks(nproc, argc, argv, port ? std::atoi(port) : 29500);
}

}  // namespace lm::app
