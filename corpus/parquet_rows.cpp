#include "corpus/parquet_rows.h"

#include "absl/strings/str_cat.h"

#ifdef LM_HAVE_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>

#include "corpus/parquet_internal.h"
#endif

namespace lm::data {

#ifndef LM_HAVE_PARQUET

absl::StatusOr<int64_t> for_each_parquet_row(const std::string& path,
                                             const std::function<absl::Status(Json&& row, int64_t index)>& fn) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": this is a Parquet file, but this build has no Parquet support (LM_WITH_PARQUET): install the "
            "pinned pyarrow (scripts/setup.sh) and rebuild, or convert it to JSON lines, e.g. python -c \"import "
            "sys, json, pyarrow.parquet as pq; [print(json.dumps(r, ensure_ascii=False)) for r in "
            "pq.read_table(sys.argv[1]).to_pylist()]\" F.parquet > F.jsonl"));
}

#else

namespace {

// A column (or a part of one) whose type has no JSON value: name the file, the column and the type.
absl::Status refuse_type(const std::string& path, const std::string& column, const arrow::DataType& type) {
  const arrow::Type::type id = type.id();
  const bool bytes = id == arrow::Type::BINARY || id == arrow::Type::LARGE_BINARY ||
                     id == arrow::Type::FIXED_SIZE_BINARY || id == arrow::Type::BINARY_VIEW;
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": column '", column, "' is of type ", type.ToString(),
      bytes ? ", bytes rather than UTF-8 text (store it as string: a Hugging Face Value('string'))"
            : ", which has no JSON value here (supported: null, bool, integers, float, double, string, list, "
              "struct, dictionary-encoded values; convert the column, e.g. with pyarrow's cast)"));
}

// Checks `type` and everything nested in it before any row is read, so that an empty file or a
// column null in every row is refused just the same.
absl::Status check_type(const std::string& path, const std::string& column, const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::NA: case arrow::Type::BOOL:
    case arrow::Type::INT8: case arrow::Type::INT16: case arrow::Type::INT32: case arrow::Type::INT64:
    case arrow::Type::UINT8: case arrow::Type::UINT16: case arrow::Type::UINT32: case arrow::Type::UINT64:
    case arrow::Type::FLOAT: case arrow::Type::DOUBLE:
    case arrow::Type::STRING: case arrow::Type::LARGE_STRING: case arrow::Type::STRING_VIEW:
      return absl::OkStatus();
    case arrow::Type::LIST: case arrow::Type::LARGE_LIST: case arrow::Type::FIXED_SIZE_LIST:
      return check_type(path, column + "[]", *type.field(0)->type());
    case arrow::Type::STRUCT:
      for (const auto& f : type.fields()) LM_RETURN_IF_ERROR(check_type(path, column + "." + f->name(), *f->type()));
      return absl::OkStatus();
    case arrow::Type::DICTIONARY:
      return check_type(path, column, *static_cast<const arrow::DictionaryType&>(type).value_type());
    default:
      return refuse_type(path, column, type);
  }
}

template <class ArrayT>
Json number_at(const arrow::Array& a, int64_t i) {
  return static_cast<const ArrayT&>(a).Value(i);
}

template <class ArrayT>
Json string_at(const arrow::Array& a, int64_t i) {
  const auto v = static_cast<const ArrayT&>(a).GetView(i);
  return std::string(v.data(), v.size());
}

Json value_at(const arrow::Array& a, int64_t i);

template <class ArrayT>
Json list_at(const arrow::Array& a, int64_t i) {
  const auto& l = static_cast<const ArrayT&>(a);
  Json out = Json::array();
  const int64_t begin = l.value_offset(i), n = l.value_length(i);
  for (int64_t j = begin; j < begin + n; ++j) out.push_back(value_at(*l.values(), j));
  return out;
}

Json struct_at(const arrow::Array& a, int64_t i) {
  const auto& s = static_cast<const arrow::StructArray&>(a);
  Json out = Json::object();
  for (int k = 0; k < s.num_fields(); ++k) out[s.struct_type()->field(k)->name()] = value_at(*s.field(k), i);
  return out;
}

// Element i of `a`, whose type check_type accepted. Integers keep their signedness (an int64 as
// nlohmann's integer, a uint64 as its unsigned), so 0 stays 0 and never becomes "0" or 0.0.
Json value_at(const arrow::Array& a, int64_t i) {
  if (a.IsNull(i)) return nullptr;
  switch (a.type_id()) {
    case arrow::Type::BOOL: return number_at<arrow::BooleanArray>(a, i);
    case arrow::Type::INT8: return number_at<arrow::Int8Array>(a, i);
    case arrow::Type::INT16: return number_at<arrow::Int16Array>(a, i);
    case arrow::Type::INT32: return number_at<arrow::Int32Array>(a, i);
    case arrow::Type::INT64: return number_at<arrow::Int64Array>(a, i);
    case arrow::Type::UINT8: return number_at<arrow::UInt8Array>(a, i);
    case arrow::Type::UINT16: return number_at<arrow::UInt16Array>(a, i);
    case arrow::Type::UINT32: return number_at<arrow::UInt32Array>(a, i);
    case arrow::Type::UINT64: return number_at<arrow::UInt64Array>(a, i);
    case arrow::Type::FLOAT: return static_cast<double>(static_cast<const arrow::FloatArray&>(a).Value(i));
    case arrow::Type::DOUBLE: return number_at<arrow::DoubleArray>(a, i);
    case arrow::Type::STRING: return string_at<arrow::StringArray>(a, i);
    case arrow::Type::LARGE_STRING: return string_at<arrow::LargeStringArray>(a, i);
    case arrow::Type::STRING_VIEW: return string_at<arrow::StringViewArray>(a, i);
    case arrow::Type::LIST: return list_at<arrow::ListArray>(a, i);
    case arrow::Type::LARGE_LIST: return list_at<arrow::LargeListArray>(a, i);
    case arrow::Type::FIXED_SIZE_LIST: return list_at<arrow::FixedSizeListArray>(a, i);
    case arrow::Type::STRUCT: return struct_at(a, i);
    case arrow::Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(a);
      return value_at(*d.dictionary(), d.GetValueIndex(i));
    }
    default: return nullptr;  // NA; check_type refused the rest
  }
}

// Converts one row group and hands its rows to fn; `next` is the file's index of its first row.
absl::Status row_group_rows(const std::string& path, parquet::arrow::FileReader& reader, int g, int64_t& next,
                            const std::function<absl::Status(Json&&, int64_t)>& fn) {
  auto table = reader.ReadRowGroup(g);
  if (!table.ok()) return internal::parquet_corrupt(path, table.status().ToString());
  const arrow::Table& t = **table;
  std::vector<Json> rows(static_cast<size_t>(t.num_rows()), Json::object());
  for (int c = 0; c < t.num_columns(); ++c) {
    const std::string& name = t.schema()->field(c)->name();
    size_t r = 0;
    for (const auto& chunk : t.column(c)->chunks())
      for (int64_t i = 0; i < chunk->length(); ++i) rows.at(r++)[name] = value_at(*chunk, i);
  }
  for (Json& row : rows) LM_RETURN_IF_ERROR(fn(std::move(row), next++));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> read_rows(const std::string& path, const std::function<absl::Status(Json&&, int64_t)>& fn) {
  LM_ASSIGN_OR_RETURN(const auto opened, internal::open_parquet(path));
  parquet::arrow::FileReader& reader = *opened;
  std::shared_ptr<arrow::Schema> schema;
  if (auto st = reader.GetSchema(&schema); !st.ok()) return internal::parquet_corrupt(path, st.ToString());
  for (const auto& f : schema->fields()) LM_RETURN_IF_ERROR(check_type(path, f->name(), *f->type()));
  int64_t next = 0;
  for (int g = 0; g < reader.num_row_groups(); ++g) LM_RETURN_IF_ERROR(row_group_rows(path, reader, g, next, fn));
  return next;
}

}  // namespace

absl::StatusOr<int64_t> for_each_parquet_row(const std::string& path,
                                             const std::function<absl::Status(Json&& row, int64_t index)>& fn) {
  try {  // parts of Parquet's reader throw ParquetException
    return read_rows(path, fn);
  } catch (const std::exception& e) {
    return internal::parquet_corrupt(path, e.what());
  }
}

#endif

absl::StatusOr<std::vector<Json>> read_parquet_rows(const std::string& path) {
  std::vector<Json> rows;
  LM_RETURN_IF_ERROR(for_each_parquet_row(path, [&](Json&& row, int64_t) {
                       rows.push_back(std::move(row));
                       return absl::OkStatus();
                     }).status());
  return rows;
}

}  // namespace lm::data
