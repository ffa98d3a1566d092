// Placeholder until the evaluation issue lands: lmeval nll reports that it is not built yet.
#include "app/commands.h"

namespace lm::app {
void add_nll(CLI::App& app, Registry& reg) {
  auto* sub = app.add_subcommand("nll", "per-token NLL vs a random-initialized twin (not built yet)");
  sub->footer("Example:\n  lmeval nll --run runs/demo --data shards/ --twin");
  add_global_flags(sub);
  reg.push_back({sub, [] { return absl::UnimplementedError("lmeval nll is not built yet"); }});
}
}  // namespace lm::app
