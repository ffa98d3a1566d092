#include "core/run_folder.h"

#include <filesystem>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/file.h"

namespace lm {
namespace fs = std::filesystem;

std::string RunFolder::path(std::string_view name) const { return (fs::path(dir_) / name).string(); }

std::string RunFolder::checkpoint(std::string_view name) const {
  return (fs::path(dir_) / "checkpoints" / name).string();
}

bool RunFolder::exists() const { return fs::exists(config()); }

std::string RunFolder::step_name(int64_t step) { return absl::StrFormat("step-%08d", step); }

absl::StatusOr<int64_t> RunFolder::parse_step_name(std::string_view name) {
  absl::string_view digits(name.data(), name.size());
  int64_t step = 0;
  if (!absl::ConsumePrefix(&digits, "step-") || !absl::SimpleAtoi(digits, &step))
    return absl::InvalidArgumentError(std::string(name) + ": folder name is not step-<N>");
  return step;
}

absl::Status RunFolder::check_policy(bool resume, bool force) const {
  const bool there = exists();
  if (there && !resume && !force) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir_, ": a run already exists here (continue it with --resume, or pass --force to start over)"));
  }
  if (resume && !there) return absl::NotFoundError(dir_ + ": no run to resume (no config.json); start it without --resume");
  return absl::OkStatus();
}

absl::Status RunFolder::open(bool resume, bool force) const {
  LM_RETURN_IF_ERROR(check_policy(resume, force));
  std::error_code ec;
  if (force && !resume) {
    LM_RETURN_IF_ERROR(remove_tree(checkpoints()));
    fs::remove(latest(), ec);
    fs::remove(metrics(), ec);
    fs::remove(samples(), ec);
    LM_RETURN_IF_ERROR(remove_tree(tensorboard()));
  }
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir_, ": cannot create: ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> RunFolder::latest_name() const {
  if (!fs::exists(latest()))
    return absl::NotFoundError(latest() + ": no checkpoint yet (the run never saved one)");
  LM_ASSIGN_OR_RETURN(std::string name, read_file(latest()));
  return std::string(absl::StripAsciiWhitespace(name));
}

absl::StatusOr<std::vector<Json>> read_metrics(const std::string& path) {
  std::vector<Json> rows;
  if (!fs::exists(path)) return rows;
  LM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      rows.push_back(Json::parse(line));
    } catch (...) {
      break;  // a torn last line from a kill
    }
  }
  return rows;
}

}  // namespace lm
