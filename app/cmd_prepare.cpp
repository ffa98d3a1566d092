// lmtrain prepare: tokenize a corpus into train/val token shards per language (or, with only
// --verify --out, re-check existing shards). Precedence: defaults < --config file < flags.
#include <cstdio>

#include "app/commands.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "data/prepare.h"
#include "runtime/runtime.h"

namespace lm::app {
namespace {

struct PrepareCmd {
  data::PrepareOptions o;
  std::string config;
  bool verify = false;
  bool force = false;  // replace an existing shards folder
};

absl::Status run_prepare(PrepareCmd& c, CLI::App* sub) {
  if (!c.config.empty()) {
    data::PrepareOptions from_file;
    LM_RETURN_IF_ERROR(load_config_file(c.config, from_file));
    Json flags = to_json(c.o), merged = to_json(from_file);
    for (auto it = flags.begin(); it != flags.end(); ++it) {
      std::string opt = "--" + it.key();
      for (auto& ch : opt) ch = ch == '_' ? '-' : ch;
      if (sub->get_option_no_throw(opt) != nullptr && sub->count(opt) > 0) merged[it.key()] = it.value();
    }
    LM_RETURN_IF_ERROR(from_json(merged, c.o, c.config));
  }
  if (global_options().threads > 0) c.o.threads = global_options().threads;
  if (c.o.out.empty()) return absl::InvalidArgumentError("--out: required (the shards folder)");
  if (c.o.corpus.empty()) {
    if (!c.verify) {
      return absl::InvalidArgumentError("--corpus: required to prepare shards (or pass --verify --out DIR to check them)");
    }
    LM_ASSIGN_OR_RETURN(std::string summary, data::verify_shards(c.o.out, c.o.tokenizer));
    std::printf("%s", summary.c_str());
    return absl::OkStatus();
  }
  if (c.o.tokenizer.empty()) return absl::InvalidArgumentError("--tokenizer: required (the folder 'lmtrain tokenizer' wrote)");
  LM_RETURN_IF_ERROR(data::check_output_folder(c.o.out, c.force));
  // SIGINT/SIGTERM: prepare stops between batches and removes its staging folder (a second one
  // exits at once; the next prepare removes what that left).
  install_stop_handlers();
  c.o.stop_signal = [] { return stop_signal(); };
  auto prepared = data::prepare(c.o);
  if (prepared.status().code() == absl::StatusCode::kCancelled && stop_signal() != 0) {
    log_warn("%s", std::string(prepared.status().message()));
    global_options().exit_code = 128 + stop_signal();
    return absl::OkStatus();
  }
  LM_ASSIGN_OR_RETURN(data::ShardManifest m, std::move(prepared));
  std::printf("%s", data::format_report(m).c_str());
  std::printf("wrote %zu shards and %s/manifest.json (%.2f MB/s of text)\n", m.shards.size(), c.o.out.c_str(),
              m.prepare.value("mb_per_s", 0.0));
  if (c.verify) {
    LM_ASSIGN_OR_RETURN(std::string summary, data::verify_shards(c.o.out, c.o.tokenizer));
    std::printf("%s", summary.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void add_prepare(CLI::App& app, Registry& reg) {
  auto c = std::make_shared<PrepareCmd>();
  CLI::App* sub = app.add_subcommand("prepare", "tokenize a corpus into train/val token shards per language");
  sub->add_option("--corpus", c->o.corpus, "corpus.json: sources, languages, mixture weights");
  sub->add_option("--tokenizer", c->o.tokenizer, "tokenizer folder (lmtrain tokenizer --out, or --import of a checkpoint)");
  sub->add_option("--out", c->o.out, "shards folder to write (or to check with --verify)");
  sub->add_option("--val-fraction", c->o.val_fraction, "share of documents held out for validation, by content hash")
      ->capture_default_str();
  sub->add_option("--shard-tokens", c->o.shard_tokens, "tokens per shard file")->capture_default_str();
  sub->add_option("--plan-tokens", c->o.plan_tokens,
                  "report the passes over each language and source that training on this many tokens makes "
                  "(e.g. 2e8; warns above 4)");
  sub->add_flag("--skip-invalid-utf8", c->o.skip_invalid_utf8, "skip and count lines with invalid UTF-8 instead of failing");
  sub->add_flag("--dedup,!--no-dedup", c->o.dedup,
                "drop exact duplicate documents (64-bit content hash); on by default, as in 'lmtrain tokenizer'; "
                "--no-dedup (CLI11 shows it as {false}) keeps them")
      ->capture_default_str();
  sub->add_flag("--force", c->force, "replace the shards in an existing, non-empty --out folder");
  sub->add_flag("--verify", c->verify, "re-open every shard with full checks (alone with --out: check only)");
  sub->add_option("--config", c->config, "JSON file with any of these options (flags win)");
  sub->footer(
      "Examples:\n"
      "  lmtrain prepare --corpus corpus.json --tokenizer tok/ --out shards/\n"
      "  lmtrain prepare --corpus corpus.json --tokenizer tok/ --out shards/ --val-fraction 0.01 --no-dedup --verify\n"
      "  lmtrain prepare --verify --out shards/ [--tokenizer tok/]\n"
      "An existing, non-empty --out is refused unless --force (runs trained on those shards would change);\n"
      "--force removes the shards the new manifest does not list and leaves other files alone.\n"
      "Signals: SIGINT/SIGTERM stop after the batch being encoded, remove OUT/.prepare.tmp, exit 130/143.");
  add_global_flags(sub);
  reg.push_back({sub, [c, sub] { return run_prepare(*c, sub); }});
}

}  // namespace lm::app
