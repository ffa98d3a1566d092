// Tokenizers of several vocabulary sizes trained on one sample (issue 31.3): each into
// out/vocab-N/ (a complete tokenizer folder with its fertility.json), and one row per size with
// Bangla and English code points per token on the held-out and parallel text, the bn/en parity,
// encode speed and training time. `lmtrain tokenizer --sweep` adds the embedding parameters each
// size costs per model preset (model/config.h; lm_tokenizer does not see the model library).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "tokenizer/report.h"
#include "tokenizer/train.h"

namespace lm::tokenizer {

absl::StatusOr<Json> sweep_vocab_sizes(const TrainingSample& sample, const TrainOptions& recipe, ReportOptions report,
                                       const std::vector<int64_t>& sizes, const std::string& out);

// The rows as a table for people.
std::string format_sweep(const Json& rows);

}  // namespace lm::tokenizer
