#include "core/config.h"

#include <algorithm>

#include "core/file.h"

namespace lm {

namespace {
// nlohmann quotes what it last read, which can be kilobytes of a damaged file.
std::string short_what(const char* what) {
  std::string s(what);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}
}  // namespace

absl::StatusOr<Json> parse_json(std::string_view text, const std::string& source, int64_t first_line) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // FILE:LINE:COLUMN, as compilers write it, so editors jump there. e.byte is 1-based and
    // points one past the offending character.
    const size_t at = std::min(text.size(), e.byte > 0 ? e.byte - 1 : 0);
    int64_t line = first_line, col = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line, ":", col, ": not valid JSON: ", short_what(e.what())));
  } catch (const Json::exception& e) {
    // out_of_range 406: a number too large for a double ("2e9000"; found by fuzz_config).
    // Its position is not reported; for one-line text (a JSONL line) the line is still known.
    const std::string at = text.find('\n') == std::string_view::npos ? absl::StrCat(":", first_line) : "";
    return absl::InvalidArgumentError(absl::StrCat(source, at, ": not valid JSON: ", short_what(e.what())));
  }
}

absl::StatusOr<Json> read_json_file(const std::string& path) {
  LM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path);
}

absl::Status write_json_file(const std::string& path, const Json& j) {
  return write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace lm
