#include "train/startup_log.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lm::train {

void StartupLog::add(const std::string& name, double seconds) {
  auto it = std::find_if(phases_.begin(), phases_.end(), [&](const StartupPhase& p) { return p.name == name; });
  if (it == phases_.end()) phases_.push_back({name, seconds});
  else it->seconds += seconds;
}

double StartupLog::phases_s() const {
  double t = 0;
  for (const auto& p : phases_) t += p.seconds;
  return t;
}

double StartupLog::wall_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

std::string StartupLog::phases_line() const {
  std::vector<std::string> parts;
  for (const auto& p : phases_) parts.push_back(absl::StrFormat("%s %.2f s", p.name, p.seconds));
  const double wall = wall_s();
  parts.push_back(absl::StrFormat("the rest (config, model, optimizer, folder) %.2f s", std::max(0.0, wall - phases_s())));
  return absl::StrFormat("start-up phases: %s; %.2f s in all", absl::StrJoin(parts, ", "), wall);
}

std::string checks_line(const StartupChecks& c, double seconds) {
  if (!c.enabled)
    return absl::StrFormat("start-up checks off (train.debug.verify_at_start false): no fast path or gradient flow "
                           "verified; start-up took %.1f s (-v times each phase)", seconds);
  std::vector<std::string> parts;
  if (c.fell_back.empty()) {
    parts.push_back(absl::StrFormat("%d fast path%s match%s %s reference%s", c.fast_paths, c.fast_paths == 1 ? "" : "s",
                                    c.fast_paths == 1 ? "es" : "", c.fast_paths == 1 ? "its" : "their",
                                    c.fast_paths == 1 ? "" : "s"));
  } else {
    parts.push_back(absl::StrFormat("%d of %d fast paths FAILED and train on their reference (slower, correct): %s",
                                    c.fell_back.size(), c.fast_paths, absl::StrJoin(c.fell_back, ", ")));
  }
  parts.push_back(c.gradient_flow ? absl::StrFormat("gradient flow reaches all %d parameters", c.parameters)
                                  : std::string("gradient flow was checked at step 0"));
  return absl::StrFormat("start-up checks%s: %s; start-up took %.1f s (-v lists each check and times each phase)",
                         c.fell_back.empty() ? " ok" : "", absl::StrJoin(parts, ", "), seconds);
}

}  // namespace lm::train
