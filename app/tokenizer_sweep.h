// lmtrain tokenizer --sweep: tokenizers of several vocabulary sizes on one sample, compared in one
// table (fertility, parity, speed, embedding parameters per model preset).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/report.h"
#include "tokenizer/train.h"

namespace lm::app {

absl::Status run_tokenizer_sweep(const tokenizer::TrainingSample& sample, const tokenizer::TrainOptions& recipe,
                                 const tokenizer::ReportOptions& report, const std::vector<int64_t>& sizes,
                                 const std::string& out);

}  // namespace lm::app
