#include "core/config.h"

#include "core/file.h"

namespace lm {

absl::StatusOr<Json> parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not valid JSON at byte ", e.byte, ": ", e.what()));
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
