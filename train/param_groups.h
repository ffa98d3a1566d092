// Parameter groups of continued pretraining (issue 37): which group a parameter belongs to, its
// learning rate there, and whether a step trains it. AdamW (train/optim.h) scales each group's lr
// and keeps each group's own step count (a group frozen for the first stage starts its bias
// correction at its own first update, as torch.optim does for a parameter that had no gradient);
// the trainer drops the gradients of the groups a step does not train, so their parameters and
// moments keep their bytes (train.param_groups in train/config.h).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "train/config.h"

namespace lm::train {

enum class ParamGroup { kEmbeddings = 0, kHead = 1, kBlocks = 2, kNorms = 3 };
inline constexpr int kParamGroups = 4;

// By registered name: model.embed_tokens.weight -> embeddings, lm_head.weight -> head, any
// RMSNorm weight (…norm.weight, …layernorm.weight) -> norms, the rest (the layers' attention and
// MLP weights and biases) -> blocks.
ParamGroup param_group(const std::string& name);
const char* group_name(ParamGroup g);  // "embeddings", "head", "blocks", "norms"

// The group's multiplier of the scheduled lr.
double lr_scale(const ParamGroupsConfig& c, ParamGroup g);

// The group's multiplier at optimizer step `step` (0-based): lr_scale, ramped in for the
// rewarmup_steps after the first stage for the groups that join there (blocks, norms).
double lr_scale_at(const ParamGroupsConfig& c, ParamGroup g, int64_t step);

// True while optimizer step `step` (0-based) is in the embeddings-only first stage.
bool embeddings_only_at(const ParamGroupsConfig& c, int64_t step);

// Whether step `step` updates group `g`: not at lr scale 0, and in the first stage only the
// embeddings and the head.
bool trains_at(const ParamGroupsConfig& c, ParamGroup g, int64_t step);

// Clears the gradients of the parameters step `step` does not train (before clipping, so the
// gradient norm is the trained parameters'). Returns how many were cleared.
int drop_frozen_grads(const std::vector<std::pair<std::string, torch::Tensor>>& params, const ParamGroupsConfig& c,
                      int64_t step);

// One line for the start-up log: "" when every group trains at the scheduled lr from step 1.
std::string describe_param_groups(const ParamGroupsConfig& c);

}  // namespace lm::train
