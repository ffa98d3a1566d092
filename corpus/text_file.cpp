#include "corpus/text_file.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "corpus/decompress.h"

namespace lm::data {
namespace fs = std::filesystem;

absl::StatusOr<std::string> read_text_file(const std::string& path) {
  if (!fs::exists(path)) return absl::NotFoundError(absl::StrCat("not found, expected ", path));
  return read_decompressed(path);
}

absl::StatusOr<std::vector<std::vector<std::string>>> parse_csv(const std::string& text, const std::string& source) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  size_t i = absl::StartsWith(text, "\xEF\xBB\xBF") ? 3 : 0;
  bool quoted = false, any = false;
  int line = 1;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') { field += '"'; ++i; }
      else if (c == '"') quoted = false;
      else { if (c == '\n') ++line; field += c; }
      continue;
    }
    any = true;
    if (c == '"') quoted = true;
    else if (c == ',') { row.push_back(std::move(field)); field.clear(); }
    else if (c == '\r') continue;
    else if (c == '\n') {
      row.push_back(std::move(field)); field.clear();
      rows.push_back(std::move(row)); row.clear();
      any = false;
      ++line;
    } else field += c;
  }
  if (quoted) return absl::DataLossError(absl::StrCat(source, ":", line, ": unterminated quoted field"));
  if (any) { row.push_back(std::move(field)); rows.push_back(std::move(row)); }
  return rows;
}

}  // namespace lm::data
