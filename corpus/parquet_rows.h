// Whole rows of a Parquet file as JSON objects (column name -> value), for data whose rows hold
// more than one text column: a Hugging Face dataset's split as lm-eval's YAML reads it
// (eval/tasks_bn.h). Same optional Arrow component as corpus/parquet.h (LM_WITH_PARQUET).
//
// Values convert as `datasets` hands them to Python (pyarrow's to_pylist): null -> null, bool ->
// bool, every int/uint width -> an integer, float/double -> a double (a float32 widened exactly,
// as Python's float(numpy.float32) is), string/large_string/string_view -> a string (UTF-8 as
// stored), list/large_list/fixed_size_list -> an array, struct -> an object, dictionary-encoded
// -> its dictionary's value. Bytes (binary) and other types (decimal, date, timestamp, map, ...)
// are refused, naming the file, the column (dotted path into structs, [] into lists) and its type.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace lm::data {

// Calls fn(row, index) for every row of the file in order (`index` counts from 0 over the whole
// file). Row groups are read one at a time. Errors, each naming the file: a build without Arrow
// (InvalidArgument naming LM_WITH_PARQUET), a column of a type with no JSON value
// (InvalidArgument naming the column and the type), a corrupt or truncated file (DataLoss). An
// error from fn stops reading and is returned as it is. Returns the number of rows.
absl::StatusOr<int64_t> for_each_parquet_row(const std::string& path,
                                             const std::function<absl::Status(Json&& row, int64_t index)>& fn);

// All rows of the file (for_each_parquet_row collected).
absl::StatusOr<std::vector<Json>> read_parquet_rows(const std::string& path);

}  // namespace lm::data
