// The tables `lmeval nll` and `lmeval mc` print on stdout, made from the result JSON that
// eval::run_nll / eval::run_mc return (and write to runs/NAME/eval/): the library computes, the
// app shows.
#pragma once

#include <string>

#include "core/config.h"
#include "eval/evaluate.h"

namespace lm::app {

// One row per language: tokens, nats/token, perplexity, bits/byte, bits/char (and the twin's).
std::string nll_table(const eval::NllOptions& o, const Json& result);

// One row per task in the order of --tasks: n, chance, acc, acc_norm, acc_bytes (mean±stderr),
// the twin's and the McNemar p-values with --twin; "-" where the harness reports acc only.
std::string mc_table(const eval::McOptions& o, const Json& result);

}  // namespace lm::app
