// Internal to lm_corpus_parquet (parquet.cpp, parquet_rows.cpp), built only with Arrow
// (LM_HAVE_PARQUET): opening a file, and the error every failed read gives.
#pragma once

#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>

#include <memory>
#include <string>

#include "core/status.h"

namespace lm::data::internal {

// Arrow's errors carry no file name: add it, and what to do (DataLoss).
absl::Status parquet_corrupt(const std::string& path, const std::string& why);

// The Arrow reader of a Parquet file: NotFound when it cannot be opened, DataLoss when it is not
// Parquet (parquet_corrupt).
absl::StatusOr<std::unique_ptr<parquet::arrow::FileReader>> open_parquet(const std::string& path);

}  // namespace lm::data::internal
