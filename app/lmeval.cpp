// lmeval: NLL against a random-initialized twin, multiple-choice benchmarks.
#include "app/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"lmeval: evaluate a trained lmforge model"};
  app.footer(
      "Examples:\n"
      "  lmeval nll --run runs/demo --data shards/ --lang bn,en --twin\n"
      "  lmeval mc --run runs/demo --tasks hellaswag,piqa,arc_easy --data-dir data/bench --twin\n"
      "Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input.");
  lm::app::Registry reg;
  lm::app::add_nll(app, reg);
  lm::app::add_mc(app, reg);
  lm::app::add_sample(app, reg);
  return lm::app::run_main(app, reg, argc, argv);
}
