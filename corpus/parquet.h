// Parquet corpora through Apache Arrow's C++ library, an optional component (CMake LM_WITH_PARQUET;
// the pyarrow wheel ships it, docs/dependencies.md). A file is Parquet by its magic bytes "PAR1",
// whatever its name; each non-null value of one string column is a document. Row groups are read
// one at a time, so memory holds one row group's column, not the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace lm::data {

// True when this build reads Parquet (built with Arrow).
bool parquet_supported();

// The first bytes of a Parquet file ("PAR1").
bool is_parquet(std::string_view head);

struct ParquetCounts {
  int64_t rows = 0;        // rows of the file
  int64_t nulls = 0;       // null values of the column (skipped: fn never sees them)
  int64_t row_groups = 0;  // row groups read
};

// The uncompressed size of a Parquet file's data from its footer (the row groups' total_byte_size,
// all columns): a progress total. 0 without Arrow or when the footer cannot be read.
uint64_t parquet_uncompressed_bytes(const std::string& path);

// Calls fn(value, row) for every non-null value of `column`, in row order (`row` counts from 0
// over the whole file). The column must hold UTF-8 strings (Arrow string or large_string); the
// bytes are passed as stored, unchecked. Errors, each naming the file: a build without Arrow
// (InvalidArgument naming LM_WITH_PARQUET), no such column (the columns it has), a column of
// another type (its type), a corrupt or truncated file (DataLoss). An error from fn stops reading
// and is returned as it is.
absl::StatusOr<ParquetCounts> for_each_parquet_value(
    const std::string& path, const std::string& column,
    const std::function<absl::Status(std::string_view value, int64_t row)>& fn);

}  // namespace lm::data
