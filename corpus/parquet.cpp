#include "corpus/parquet.h"

#include "absl/strings/str_cat.h"

#ifdef LM_HAVE_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>

#include "corpus/parquet_internal.h"
#endif

namespace lm::data {

bool is_parquet(std::string_view head) { return head.substr(0, 4) == "PAR1"; }

#ifndef LM_HAVE_PARQUET

bool parquet_supported() { return false; }

uint64_t parquet_uncompressed_bytes(const std::string& path) { return 0; }

absl::StatusOr<ParquetCounts> for_each_parquet_value(
    const std::string& path, const std::string& column,
    const std::function<absl::Status(std::string_view value, int64_t row)>& fn) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": this is a Parquet file, but this build has no Parquet support (LM_WITH_PARQUET): install the "
            "pinned pyarrow (scripts/setup.sh) and rebuild, or export its text column to .jsonl (e.g. with pyarrow "
            "or duckdb) and read that"));
}

#else

bool parquet_supported() { return true; }

uint64_t parquet_uncompressed_bytes(const std::string& path) {
  auto file = arrow::io::ReadableFile::Open(path);
  if (!file.ok()) return 0;
  try {  // the footer reader throws parquet::ParquetException on a bad file
    const auto meta = parquet::ParquetFileReader::Open(*file)->metadata();
    uint64_t total = 0;
    for (int g = 0; g < meta->num_row_groups(); ++g) total += static_cast<uint64_t>(meta->RowGroup(g)->total_byte_size());
    return total;
  } catch (const std::exception&) {
    return 0;
  }
}

namespace internal {

absl::Status parquet_corrupt(const std::string& path, const std::string& why) {
  return absl::DataLossError(absl::StrCat(path, ": cannot read as Parquet: ", why, " (corrupt or truncated file?)"));
}

absl::StatusOr<std::unique_ptr<parquet::arrow::FileReader>> open_parquet(const std::string& path) {
  auto file = arrow::io::ReadableFile::Open(path);
  if (!file.ok()) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", file.status().ToString()));
  auto opened = parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
  if (!opened.ok()) return parquet_corrupt(path, opened.status().ToString());
  return std::move(*opened);
}

}  // namespace internal

namespace {

// The leaf column index of a top-level string column, or an error naming the columns and types.
absl::StatusOr<int> string_column(const std::string& path, parquet::arrow::FileReader& reader,
                                  const std::string& column) {
  std::shared_ptr<arrow::Schema> schema;
  if (auto st = reader.GetSchema(&schema); !st.ok()) return internal::parquet_corrupt(path, st.ToString());
  const std::shared_ptr<arrow::Field> field = schema->GetFieldByName(column);
  if (field == nullptr) {
    std::string names;
    for (const auto& f : schema->fields()) absl::StrAppend(&names, names.empty() ? "" : ", ", f->name());
    return absl::InvalidArgumentError(absl::StrCat(path, ": no column '", column, "' (it has: ", names,
                                                   "; set the source's \"column\" in corpus.json)"));
  }
  const arrow::Type::type id = field->type()->id();
  if (id != arrow::Type::STRING && id != arrow::Type::LARGE_STRING)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": column '", column, "' is of type ", field->type()->ToString(),
        ", expected UTF-8 strings (string or large_string; set the source's \"column\" to the text column)"));
  const int leaf = reader.parquet_reader()->metadata()->schema()->ColumnIndex(column);
  if (leaf < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": column '", column, "' is not a leaf column"));
  return leaf;
}

// Hands the non-null values of one column chunk to fn; counts the nulls.
template <class ArrayT>
absl::Status each_value(const arrow::Array& chunk, int64_t& row, ParquetCounts& counts,
                        const std::function<absl::Status(std::string_view, int64_t)>& fn) {
  const auto& a = static_cast<const ArrayT&>(chunk);
  for (int64_t i = 0; i < a.length(); ++i, ++row) {
    if (a.IsNull(i)) {
      ++counts.nulls;
      continue;
    }
    const auto v = a.GetView(i);
    LM_RETURN_IF_ERROR(fn(std::string_view(v.data(), v.size()), row));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParquetCounts> read_values(const std::string& path, const std::string& column,
                                          const std::function<absl::Status(std::string_view, int64_t)>& fn) {
  LM_ASSIGN_OR_RETURN(const auto opened, internal::open_parquet(path));
  parquet::arrow::FileReader& reader = *opened;
  LM_ASSIGN_OR_RETURN(const int leaf, string_column(path, reader, column));
  ParquetCounts counts;
  int64_t row = 0;
  for (int g = 0; g < reader.num_row_groups(); ++g) {
    auto table = reader.ReadRowGroup(g, {leaf});
    if (!table.ok()) return internal::parquet_corrupt(path, table.status().ToString());
    for (const auto& chunk : (*table)->column(0)->chunks()) {
      const bool large = chunk->type_id() == arrow::Type::LARGE_STRING;
      LM_RETURN_IF_ERROR(large ? each_value<arrow::LargeStringArray>(*chunk, row, counts, fn)
                               : each_value<arrow::StringArray>(*chunk, row, counts, fn));
    }
    ++counts.row_groups;
  }
  counts.rows = row;
  return counts;
}

}  // namespace

absl::StatusOr<ParquetCounts> for_each_parquet_value(
    const std::string& path, const std::string& column,
    const std::function<absl::Status(std::string_view value, int64_t row)>& fn) {
  try {  // parquet::arrow returns Status, but parts of Parquet's reader throw ParquetException
    return read_values(path, column, fn);
  } catch (const std::exception& e) {
    return internal::parquet_corrupt(path, e.what());
  }
}

#endif

}  // namespace lm::data
