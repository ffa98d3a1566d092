// One rank of the data-parallel test (tests/train/ddp_test.cpp starts 1 or 2 of these).
// Trains the tiny preset on synthetic rows for --steps, writes the losses to --losses.
// Environment knobs: LM_DDP_OVERLAP=0 (post-backward all-reduce), LM_DDP_BUCKET_MB, LM_DDP_ACCUM
// (micro-batches per step; the global batch stays the same), LM_DDP_DEVICE=cuda, LM_DDP_FORCE_COMM=1
// (a process group even with WORLD_SIZE=1: the NCCL smoke run), LM_DDP_STATS=FILE (bucket counts,
// then the step-result reads and the ranks' stop agreements), LM_DDP_LOG_EVERY (train.logging.interval),
// LM_DDP_RANK1_DIR (rank 1's run folder instead of RUN_DIR: a node with its own copy), LM_DDP_ZERO=1
// (ZeRO-1: sharded AdamW state), LM_DDP_CLIP (train.optimizer.grad_clip), LM_DDP_OPT_BYTES=PREFIX
// (each rank writes its AdamW moment bytes to PREFIX.RANK), LM_DDP_PRESET (default tiny) and
// LM_DDP_SEQ (default 32): a larger model for timing; LM_DDP_GLOBAL_BATCH (instead of GLOBAL_BATCH),
// LM_DDP_SIGTERM_AT=N (rank 1 gets a stop request, as SIGTERM's handler makes, when it fetches its
// N-th window; it writes how many windows it fetched after that to RUN_DIR/rank1.after),
// LM_DDP_DTYPE (train.hardware.dtype, default auto: fp32 on the CPU), LM_DDP_MASTER
// (train.distributed.master_weights: sharded is the distributed optimizer), LM_DDP_REDUCE
// (train.distributed.reduce_dtype: bf16 gradient collectives).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/log.h"
#include "runtime/runtime.h"
#include "model/config.h"
#include "tests/train/synthetic_source.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace {
const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? v : fallback;
}

// The synthetic rows with a stop request at a chosen window (LM_DDP_SIGTERM_AT).
class StopAtWindow : public lm::train::testing::SyntheticSource {
 public:
  StopAtWindow(int64_t rows, int64_t len, int64_t vocab, int rank, int world, int64_t stop_at)
      : SyntheticSource(rows, len, vocab, rank, world), stop_at_(stop_at) {}
  void next(std::vector<int32_t>* out) override {
    if (++fetched_ == stop_at_) lm::request_stop(SIGTERM);
    if (stop_at_ > 0 && fetched_ > stop_at_) ++after_;
    SyntheticSource::next(out);
  }
  int64_t after_ = 0;

 private:
  int64_t stop_at_, fetched_ = 0;
};
}  // namespace

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
  const std::string device = env_or("LM_DDP_DEVICE", "cpu");
  if (env->active() || std::atoi(env_or("LM_DDP_FORCE_COMM", "0")) != 0) {
    auto dev = lm::train::rank_device(*env, device == "cuda" ? torch::kCUDA : torch::kCPU);
    if (!dev.ok()) return lm::report_error(dev.status());
    auto c = lm::train::Comm::connect(*env, *dev, std::chrono::seconds(60));
    if (!c.ok()) return lm::report_error(c.status());
    comm = std::move(*c);
  }
  lm::train::FitRequest r;
  r.run_dir = argv[1];
  if (env->rank == 1 && std::getenv("LM_DDP_RANK1_DIR") != nullptr) r.run_dir = std::getenv("LM_DDP_RANK1_DIR");
  r.model = *lm::model::preset(env_or("LM_DDP_PRESET", "tiny"));
  r.train.steps = std::atoi(argv[2]);
  r.train.batch.grad_accum = std::atoi(env_or("LM_DDP_ACCUM", "1"));
  const int global_batch = std::atoi(env_or("LM_DDP_GLOBAL_BATCH", argv[3]));
  r.train.batch.micro_batch = global_batch / env->world / r.train.batch.grad_accum;
  r.train.distributed.overlap = std::atoi(env_or("LM_DDP_OVERLAP", "1")) != 0;
  r.train.distributed.bucket_mb = std::atof(env_or("LM_DDP_BUCKET_MB", "25"));
  r.train.distributed.zero = std::atoi(env_or("LM_DDP_ZERO", "0"));
  r.train.distributed.master_weights = env_or("LM_DDP_MASTER", "whole");
  r.train.distributed.reduce_dtype = env_or("LM_DDP_REDUCE", "fp32");
  r.train.hardware.dtype = env_or("LM_DDP_DTYPE", "auto");
  if (const char* clip = std::getenv("LM_DDP_CLIP"); clip != nullptr) r.train.optimizer.grad_clip = std::atof(clip);
  r.train.hardware.device = device;
  r.train.batch.seq_len = std::atoi(env_or("LM_DDP_SEQ", "32"));
  r.train.schedule.warmup_steps = 2;
  r.train.logging.interval = std::atoi(env_or("LM_DDP_LOG_EVERY", "1"));
  r.train.eval.interval = 0;
  r.train.checkpoint.interval = 0;
  r.train.hardware.threads = 1;
  r.train.param_groups.embeddings_only_steps = std::atoi(env_or("LM_DDP_EMBEDDINGS_ONLY", "0"));
  r.train.stop_at_step = std::atoi(argv[4]);
  r.resume = std::atoi(argv[5]) != 0;
  r.force = !r.resume;
  r.tokenizer_hash = "tok-test";
  r.world_size = env->world;
  r.rank = env->rank;
  r.local_rank = env->local_rank;
  r.comm = comm.get();
  const int64_t stop_at = env->rank == 1 ? std::atoll(env_or("LM_DDP_SIGTERM_AT", "0")) : 0;
  StopAtWindow src(r.train.batch.micro_batch, r.train.batch.seq_len + 1, r.model.vocab_size, env->rank, env->world,
                   stop_at);
  auto sum = lm::train::fit(r, src, {});
  if (stop_at > 0) std::ofstream(r.run_dir + "/rank1.after") << src.after_ << "\n";
  if (!sum.ok()) return lm::report_error(sum.status());
  if (env->rank == 0 && argc > 6) {
    std::ofstream out(argv[6]);
    for (double l : sum->losses) out << std::hexfloat << l << "\n";
  }
  if (const char* bytes = std::getenv("LM_DDP_OPT_BYTES"); bytes != nullptr) {
    std::ofstream out(std::string(bytes) + "." + std::to_string(env->rank));
    out << sum->optimizer_bytes << " " << sum->master_bytes << " " << sum->weight_bytes << "\n";
  }
  if (const char* stats = std::getenv("LM_DDP_STATS"); stats != nullptr && env->rank == 0) {
    std::ofstream out(stats);
    out << sum->buckets_synced << " " << sum->buckets_in_backward << " " << sum->comm_wait_s << " " << sum->step_s
        << " " << sum->host_reads << " " << sum->rank_agreements << "\n";
  }
  return 0;
}
