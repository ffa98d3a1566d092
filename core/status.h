// Status helpers shared by every library: absl::Status at I/O and user boundaries.
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define LM_STATUS_CONCAT_INNER_(a, b) a##b
#define LM_STATUS_CONCAT_(a, b) LM_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not ok.
#define LM_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::absl::Status lm_status_ = (expr);               \
    if (!lm_status_.ok()) return lm_status_;          \
  } while (0)

// `LM_ASSIGN_OR_RETURN(auto x, f());` unwraps a StatusOr or returns its error.
#define LM_ASSIGN_OR_RETURN(lhs, expr) \
  LM_ASSIGN_OR_RETURN_IMPL_(LM_STATUS_CONCAT_(lm_statusor_, __LINE__), lhs, expr)
#define LM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

namespace lm {

// Exit codes of both programs (README, "Programs"): 0 ok, 1 runtime failure, 2 bad usage or input.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitBadInput = 2;

// Bad input (a file, a field, a flag) maps to exit 2; everything else to 1.
int exit_code_for(const absl::Status& status);

// Prints "error: <message>" to stderr and returns the exit code for it.
int report_error(const absl::Status& status);

// Prefixes an error's message with context ("reading corpus.json: ...").
absl::Status annotate(const absl::Status& status, std::string_view context);

}  // namespace lm
