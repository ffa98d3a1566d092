// Hugging Face checkpoint folders as lmforge models (`lmtrain fit --init-from HF_DIR`,
// `lmtrain import`): config.json of a LlamaForCausalLM (Llama 2, 3, 3.1, 3.2) or Qwen2ForCausalLM
// becomes a ModelConfig, and the weights of model.safetensors, or of the shards that
// model.safetensors.index.json lists, are copied tensor by tensor out of read-only file mappings
// straight into the model's fp32 parameters (bf16, fp16 or fp32 on disk). lmforge's registered
// names are the HF names, so nothing is renamed; lmforge's own exports are LlamaForCausalLM
// folders and load the same way.
//
// Refused, naming the field and the file: another architecture, a rope type other than default
// or llama3, a quantization_config, sliding-window attention in use, Llama's attention_bias (it
// biases o_proj too), mlp_bias, an activation other than silu.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/transformer.h"

namespace lm::model {

// True when `dir` holds a config.json (the folder is then read as an HF checkpoint).
bool is_hf_checkpoint(const std::string& dir);

// The ModelConfig of an HF config.json (`source` names it in errors). rope_theta and the rope
// scaling come from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (the Hub's
// files); absent keys take the defaults of transformers' LlamaConfig / Qwen2Config.
absl::StatusOr<ModelConfig> hf_model_config(const Json& hf, const std::string& source);
absl::StatusOr<ModelConfig> read_hf_config(const std::string& dir);

// What a checkpoint holds, for people (`lmtrain import`).
struct HfCheckpointInfo {
  ModelConfig config;
  std::string architecture;                // as config.json names it: "LlamaForCausalLM"
  std::vector<std::string> weight_files;   // model.safetensors, or the index's shards
  int64_t file_bytes = 0;                  // their total size
  std::string stored_dtypes;               // "bf16", "fp16, fp32", ...
  int64_t tensors = 0;
};
absl::StatusOr<HfCheckpointInfo> inspect_hf_checkpoint(const std::string& dir);

// The mapped weight files of a checkpoint (model.safetensors, or the shards of
// model.safetensors.index.json, checked against it) and where each tensor is.
struct HfWeights {
  std::vector<MappedSafetensors> files;
  std::map<std::string, std::pair<size_t, const SafetensorsEntry*>> where;  // name -> file, entry
  std::string index;  // the index file's path; "" for one model.safetensors
};
absl::StatusOr<HfWeights> open_hf_weights(const std::string& dir);

// Copies the checkpoint's tensors into `model` (any dtype and device), each straight from the
// mapped file. Every parameter must be there with its shape; a tensor the model has no place for
// is an error, except rotary_emb.inv_freq (recomputed) and a tied model's lm_head.weight.
absl::Status load_hf_weights(const std::string& dir, Transformer& model);

// Config and weights: an fp32 CPU model equal to the checkpoint.
absl::StatusOr<Transformer> import_hf(const std::string& dir);

// --init-from: the folder's config must describe `model`'s architecture (FailedPrecondition
// naming each differing field otherwise); then load_hf_weights.
absl::Status init_from_hf(const std::string& dir, Transformer& model);

}  // namespace lm::model
