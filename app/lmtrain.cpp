// lmtrain: tokenizer training, sharding, pretraining and verification.
#include "app/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"lmtrain: train a Bangla-first language model from raw text"};
  app.footer(
      "Examples:\n"
      "  lmtrain demo                                   # whole chain on the bundled sample\n"
      "  lmtrain check --preset tiny                    # verification core\n"
      "  lmtrain check --preset 400m --dry-run          # sizes and FLOPs\n"
      "  lmtrain tokenizer --corpus corpus.json --vocab-size 32000 --out tok/\n"
      "  lmtrain prepare --corpus corpus.json --tokenizer tok/ --out shards/\n"
      "  lmtrain fit --data shards/ --preset small --out runs/demo\n"
      "  lmtrain extend-model --hf hf/Llama-3.2-1B --tokenizer tok-ext/ --out hf/Llama-3.2-1B-bn\n"
      "Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input, 128+N after signal N.");
  if (int rc = lm::app::maybe_launch_fit(argc, argv); rc >= 0) return rc;
  lm::app::Registry reg;
  lm::app::add_demo(app, reg);
  lm::app::add_check(app, reg);
  lm::app::add_fit(app, reg);
  lm::app::add_tokenizer(app, reg);
  lm::app::add_prepare(app, reg);
  lm::app::add_plan(app, reg);
  lm::app::add_export(app, reg);
  lm::app::add_report(app, reg);
  lm::app::add_extend_model(app, reg);
  return lm::app::run_main(app, reg, argc, argv);
}
