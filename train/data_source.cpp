#include "train/data_source.h"

namespace lm::train {

absl::StatusOr<ValSets> load_validation(const data::ShardSet& set, int64_t seq_len, int64_t max_windows) {
  ValSets out;
  for (const auto& lang : set.languages("val")) {
    LM_ASSIGN_OR_RETURN(auto windows, data::validation_windows(set, lang, seq_len, max_windows));
    if (!windows.empty()) out[lang] = std::move(windows);
  }
  return out;
}

}  // namespace lm::train
