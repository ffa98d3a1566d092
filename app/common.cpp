#include <cstdio>

#include "app/commands.h"
#include "core/log.h"
#include "runtime/runtime.h"

namespace lm::app {

GlobalOptions& global_options() {
  static GlobalOptions g;
  return g;
}

void add_global_flags(CLI::App* sub) {
  sub->add_option("--threads", global_options().threads,
                  "CPU threads; 0 = fit, nll, mc and sample time 1 thread against all cores at start-up and keep the "
                  "faster (docs/performance.md, 'Threads'), the other commands use all cores")
      ->capture_default_str();
  sub->add_flag("--quiet,-q", global_options().quiet, "only warnings and errors (wins over -v)");
  sub->add_flag("--verbose,-v", global_options().verbose,
                "the details behind the default log too: each start-up check with its figures, versions, the time "
                "of each start-up phase, per-source tables");
}

int run_main(CLI::App& app, Registry& registry, int argc, char** argv) {
  app.require_subcommand(1);
  std::string program = argv[0];
  program = program.substr(program.find_last_of('/') + 1);
  app.set_version_flag("--version", [program] { return version_report(program.c_str()); },
                       "LibTorch, CUDA, cuDNN and NCCL compiled in, the device found, the BLAS; then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  init_output(global_options().quiet, global_options().verbose);
  setup_threads(global_options().threads);
  for (auto& cmd : registry) {
    if (cmd.sub->parsed()) {
      try {
        absl::Status st = cmd.run();
        if (global_options().exit_code < 0) return report_error(st);
        report_error(st);  // says why, when not ok; the command's own exit code (e.g. 128+signal) wins
        return global_options().exit_code;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return kExitRuntime;
      }
    }
  }
  return kExitBadInput;
}

}  // namespace lm::app
