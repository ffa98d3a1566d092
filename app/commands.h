// Subcommands of lmtrain and lmeval. Each add_* registers its CLI11 subcommand with its
// options and returns the function that runs it; the mains stay thin.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace lm::app {

struct Command {
  CLI::App* sub = nullptr;
  std::function<absl::Status()> run;
};
using Registry = std::vector<Command>;

// Options every subcommand shares, filled before run() is called.
struct GlobalOptions {
  int threads = 0;  // 0 = measured at start-up where a model runs (runtime/threads.h), else all cores
  bool quiet = false;
  bool verbose = false;  // -v: log_detail lines too (core/log.h)
  int exit_code = -1;  // set by a command that ends on a signal (128+N) with an ok status
};
GlobalOptions& global_options();

// Adds --threads, --quiet and --verbose to a subcommand.
void add_global_flags(CLI::App* sub);

// Parses argv, runs the chosen subcommand and returns the process exit code.
int run_main(CLI::App& app, Registry& registry, int argc, char** argv);

// lmtrain
void add_check(CLI::App& app, Registry& reg);
void add_tokenizer(CLI::App& app, Registry& reg);
void add_prepare(CLI::App& app, Registry& reg);
void add_fit(CLI::App& app, Registry& reg);
// Returns the exit code when `fit --nproc N` launched N local ranks, else -1.
int maybe_launch_fit(int argc, char** argv);
void add_demo(CLI::App& app, Registry& reg);
void add_plan(CLI::App& app, Registry& reg);
void add_export(CLI::App& app, Registry& reg);  // HF Llama folder
void add_report(CLI::App& app, Registry& reg);  // report.html
void add_extend_model(CLI::App& app, Registry& reg);  // HF checkpoint grown to an extended vocabulary

// lmeval
void add_nll(CLI::App& app, Registry& reg);
void add_mc(CLI::App& app, Registry& reg);
void add_sample(CLI::App& app, Registry& reg);  // generation with the KV cache

}  // namespace lm::app
