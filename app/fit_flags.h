// The flags of `lmtrain fit` that override the training config, bound to a TrainOverrides. One
// definition for the command and for the test that parses `lmtrain plan`'s printed fit command
// (tests/train/plan_test.cpp), so the plan can only print flags fit understands.
#pragma once

#include <CLI/CLI.hpp>

#include "train/config.h"

namespace lm::app {

inline void add_train_flags(CLI::App* sub, train::TrainOverrides& t) {
  sub->add_option("--tokens", t.tokens, "token budget (e.g. 2e9); wins over steps (default: the preset's)");
  sub->add_option("--steps", t.steps, "optimizer steps (clears the preset's token budget)");
  sub->add_option("--lr", t.lr, "peak learning rate");
  sub->add_option("--micro-batch", t.micro_batch, "sequences per micro-batch per rank");
  sub->add_option("--seq-len", t.seq_len, "sequence length");
  sub->add_option("--grad-accum", t.grad_accum, "micro-batches per optimizer step (clears batch_tokens)");
  sub->add_option("--batch-tokens", t.batch_tokens, "global batch in tokens (derives --grad-accum)");
  sub->add_option("--stop-at-step", t.stop_at_step, "checkpoint and stop at this step (schedule unchanged)");
  sub->add_option("--checkpoint-interval", t.checkpoint_interval, "checkpoint every N steps (0 = off)");
  sub->add_option("--checkpoint-minutes", t.checkpoint_minutes, "checkpoint every M wall-clock minutes (0 = off)");
  sub->add_option("--dtype", t.dtype, "auto (bf16 on cuda, fp32 on cpu), fp32 or bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  sub->add_option("--device", t.device, "auto (cuda when a GPU is visible), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--tf32", t.tf32, "on|off: TF32 tensor cores for fp32 matmuls on cuda (default on)");
}

}  // namespace lm::app
