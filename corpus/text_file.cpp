#include "corpus/text_file.h"

#include <bzlib.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"

namespace lm::data {
namespace fs = std::filesystem;

absl::StatusOr<std::string> read_text_file(const std::string& path) {
  if (!fs::exists(path)) return absl::NotFoundError(absl::StrCat("not found, expected ", path));
  LM_ASSIGN_OR_RETURN(std::string raw, read_file(path));
  if (!absl::EndsWith(path, ".bz2")) return raw;
  // Streams one after another (pbzip2 writes several) decode into one text.
  std::string out;
  size_t pos = 0;
  std::vector<char> buf(1 << 16);
  while (pos < raw.size()) {
    bz_stream s{};
    if (BZ2_bzDecompressInit(&s, 0, 0) != BZ_OK) return absl::InternalError("BZ2_bzDecompressInit failed");
    s.next_in = raw.data() + pos;
    s.avail_in = static_cast<unsigned>(raw.size() - pos);
    int rc = BZ_OK;
    while (rc != BZ_STREAM_END) {
      s.next_out = buf.data();
      s.avail_out = static_cast<unsigned>(buf.size());
      rc = BZ2_bzDecompress(&s);
      const size_t produced = buf.size() - s.avail_out;
      out.append(buf.data(), produced);
      if ((rc != BZ_OK && rc != BZ_STREAM_END) || (rc == BZ_OK && s.avail_in == 0 && produced == 0)) {
        BZ2_bzDecompressEnd(&s);
        return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated bzip2 data after ", out.size(),
                                                " decoded bytes (bzip2 code ", rc, ")"));
      }
    }
    pos = raw.size() - s.avail_in;
    BZ2_bzDecompressEnd(&s);
  }
  return out;
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
