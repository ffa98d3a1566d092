#include "core/status.h"

#include <cstdio>

namespace lm {

int exit_code_for(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:  // disk full or file size limit: free space, --resume
      return kExitBadInput;
    default:
      return kExitRuntime;
  }
}

int report_error(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return exit_code_for(status);
}

absl::Status annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(std::string(context), ": ", std::string(status.message())));
}

}  // namespace lm
