#include "train/param_groups.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lm::train {

ParamGroup param_group(const std::string& name) {
  if (name == "model.embed_tokens.weight") return ParamGroup::kEmbeddings;
  if (name == "lm_head.weight") return ParamGroup::kHead;
  const std::string tail = "norm.weight";
  if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) return ParamGroup::kNorms;
  return ParamGroup::kBlocks;
}

const char* group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::kEmbeddings: return "embeddings";
    case ParamGroup::kHead: return "head";
    case ParamGroup::kBlocks: return "blocks";
    case ParamGroup::kNorms: return "norms";
  }
  return "?";
}

double lr_scale(const ParamGroupsConfig& c, ParamGroup g) {
  switch (g) {
    case ParamGroup::kEmbeddings: return c.embeddings_lr_scale;
    case ParamGroup::kHead: return c.head_lr_scale;
    case ParamGroup::kBlocks: return c.blocks_lr_scale;
    case ParamGroup::kNorms: return c.norms_lr_scale;
  }
  return 1.0;
}

bool embeddings_only_at(const ParamGroupsConfig& c, int64_t step) { return step < c.embeddings_only_steps; }

double lr_scale_at(const ParamGroupsConfig& c, ParamGroup g, int64_t step) {
  const double s = lr_scale(c, g);
  const bool joins = g == ParamGroup::kBlocks || g == ParamGroup::kNorms;
  const int64_t since = step - c.embeddings_only_steps;  // 0 at the first step of the whole model
  if (!joins || c.embeddings_only_steps == 0 || since < 0 || since >= c.rewarmup_steps) return s;
  return s * static_cast<double>(since + 1) / static_cast<double>(c.rewarmup_steps);
}

bool trains_at(const ParamGroupsConfig& c, ParamGroup g, int64_t step) {
  if (lr_scale(c, g) == 0) return false;
  if (!embeddings_only_at(c, step)) return true;
  return g == ParamGroup::kEmbeddings || g == ParamGroup::kHead;
}

int drop_frozen_grads(const std::vector<std::pair<std::string, torch::Tensor>>& params, const ParamGroupsConfig& c,
                      int64_t step) {
  int dropped = 0;
  for (const auto& [name, p] : params) {
    if (trains_at(c, param_group(name), step) || !p.grad().defined()) continue;
    p.mutable_grad() = torch::Tensor();  // mutable_grad() is const: the grad slot, not the tensor
    ++dropped;
  }
  return dropped;
}

std::string describe_param_groups(const ParamGroupsConfig& c) {
  std::vector<std::string> scales, frozen;
  for (int i = 0; i < kParamGroups; ++i) {
    const auto g = static_cast<ParamGroup>(i);
    const double s = lr_scale(c, g);
    if (s == 0) frozen.push_back(group_name(g));
    else if (s != 1.0) scales.push_back(absl::StrFormat("%s x%g", group_name(g), s));
  }
  std::vector<std::string> parts;
  if (c.embeddings_only_steps > 0)
    parts.push_back(absl::StrCat("steps 1-", c.embeddings_only_steps,
                                 " train only the embeddings and the head, then the whole model",
                                 c.rewarmup_steps > 0 ? absl::StrCat(" (blocks and norms ramped in over ",
                                                                     c.rewarmup_steps, " steps)")
                                                      : std::string()));
  if (!scales.empty()) parts.push_back("lr " + absl::StrJoin(scales, ", "));
  if (!frozen.empty()) parts.push_back("frozen for the whole run: " + absl::StrJoin(frozen, ", "));
  return parts.empty() ? "" : "parameter groups: " + absl::StrJoin(parts, "; ");
}

}  // namespace lm::train
