// One rank of the data-parallel test (tests/train/ddp_test.cpp starts 1 or 2 of these).
// Trains the tiny preset on synthetic rows for --steps, writes the losses to --losses.
#include <cstdio>
#include <fstream>

#include "core/log.h"
#include "core/runtime.h"
#include "model/config.h"
#include "tests/train/synthetic_source.h"
#include "train/distributed.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: ddp_worker RUN_DIR STEPS GLOBAL_BATCH STOP_AT(-1) RESUME(0/1) LOSSES_FILE\n");
    return 2;
  }
  lm::init_output(true);
  lm::setup_threads(1);
  auto env = lm::train::dist_env_from_environment();
  if (!env.ok()) return lm::report_error(env.status());
  std::unique_ptr<lm::train::Comm> comm;
  if (env->active()) {
    auto c = lm::train::Comm::connect(*env, torch::kCPU, std::chrono::seconds(60));
    if (!c.ok()) return lm::report_error(c.status());
    comm = std::move(*c);
  }
  lm::train::FitRequest r;
  r.run_dir = argv[1];
  r.model = *lm::model::preset("tiny");
  r.train.steps = std::atoi(argv[2]);
  r.train.micro_batch = std::atoi(argv[3]) / env->world;
  r.train.seq_len = 32;
  r.train.warmup_steps = 2;
  r.train.log_interval = 1;
  r.train.eval_interval = 0;
  r.train.checkpoint_interval = 0;
  r.train.threads = 1;
  r.train.stop_at_step = std::atoi(argv[4]);
  r.resume = std::atoi(argv[5]) != 0;
  r.force = !r.resume;
  r.tokenizer_hash = "tok-test";
  r.world_size = env->world;
  r.rank = env->rank;
  r.comm = comm.get();
  lm::train::testing::SyntheticSource src(r.train.micro_batch, r.train.seq_len + 1, r.model.vocab_size,
                                          env->rank, env->world);
  auto sum = lm::train::fit(r, src, {});
  if (!sum.ok()) return lm::report_error(sum.status());
  if (env->rank == 0 && argc > 6) {
    std::ofstream out(argv[6]);
    for (double l : sum->losses) out << std::hexfloat << l << "\n";
  }
  return 0;
}
