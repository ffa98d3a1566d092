#include "model/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "core/file.h"
#include "core/log.h"
#include "model/safetensors.h"

namespace lm::model {
namespace fs = std::filesystem;
namespace {

// The checkpoint families lmforge models, with the defaults transformers' config classes give
// keys a config.json leaves out.
struct Family {
  const char* architecture;  // config.json "architectures"
  const char* model_type;
  const char* name;          // ModelConfig::architecture
  int64_t max_positions;     // max_position_embeddings default
};
constexpr Family kFamilies[] = {{"LlamaForCausalLM", "llama", "llama", 2048},
                                {"Qwen2ForCausalLM", "qwen2", "qwen2", 32768}};

absl::Status refuse(const std::string& src, const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(src, ": ", field, ": ", why));
}

bool present(const Json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

absl::StatusOr<const Family*> family_of(const Json& hf, const std::string& src) {
  const std::string hint = "lmforge imports LlamaForCausalLM (Llama 2, 3, 3.1, 3.2) and Qwen2ForCausalLM";
  if (!present(hf, "architectures") || !hf["architectures"].is_array() || hf["architectures"].size() != 1 ||
      !hf["architectures"][0].is_string())
    return refuse(src, "architectures", "expected one architecture name, got " +
                                            (hf.contains("architectures") ? hf["architectures"].dump() : "none") + "; " + hint);
  const std::string arch = hf["architectures"][0].get<std::string>();
  for (const auto& f : kFamilies) {
    if (arch != f.architecture) continue;
    if (present(hf, "model_type") && hf["model_type"] != f.model_type)
      return refuse(src, "model_type", absl::StrCat(hf["model_type"].dump(), " does not go with ", arch, " (expected \"",
                                                    f.model_type, "\")"));
    return &f;
  }
  return refuse(src, "architectures", "\"" + arch + "\" is not supported; " + hint);
}

absl::Status get_int(const Json& j, const char* key, int64_t& out, bool required, const std::string& src,
                     const std::string& prefix = "") {
  if (!present(j, key)) return required ? refuse(src, prefix + key, "missing (not a causal LM config.json?)") : absl::OkStatus();
  if (!j[key].is_number_integer()) return refuse(src, prefix + key, "expected an integer, got " + j[key].dump());
  out = j[key].get<int64_t>();
  return absl::OkStatus();
}

absl::Status get_number(const Json& j, const char* key, double& out, bool required, const std::string& src,
                        const std::string& prefix = "") {
  if (!present(j, key)) return required ? refuse(src, prefix + key, "missing") : absl::OkStatus();
  if (!j[key].is_number()) return refuse(src, prefix + key, "expected a number, got " + j[key].dump());
  out = j[key].get<double>();
  return absl::OkStatus();
}

absl::Status get_bool(const Json& j, const char* key, bool& out, const std::string& src) {
  if (!present(j, key)) return absl::OkStatus();
  if (!j[key].is_boolean()) return refuse(src, key, "expected true or false, got " + j[key].dump());
  out = j[key].get<bool>();
  return absl::OkStatus();
}

// What the model would compute differently from lmforge's decoder.
absl::Status refuse_unsupported(const Json& hf, const Family& f, const std::string& src) {
  if (present(hf, "quantization_config"))
    return refuse(src, "quantization_config", "quantized checkpoints are not supported (import the bf16/fp16/fp32 original)");
  if (present(hf, "hidden_act") && hf["hidden_act"] != "silu")
    return refuse(src, "hidden_act", "only silu (SwiGLU) is supported, got " + hf["hidden_act"].dump());
  bool flag = false;
  LM_RETURN_IF_ERROR(get_bool(hf, "mlp_bias", flag, src));
  if (flag) return refuse(src, "mlp_bias", "MLP biases are not supported");
  LM_RETURN_IF_ERROR(get_bool(hf, "attention_bias", flag, src));
  if (flag && std::string(f.name) == "llama")
    return refuse(src, "attention_bias", "Llama's attention_bias (q/k/v and o_proj biases) is not supported");
  bool sliding = false;
  LM_RETURN_IF_ERROR(get_bool(hf, "use_sliding_window", sliding, src));
  if (sliding) return refuse(src, "use_sliding_window", "sliding-window attention is not supported");
  if (present(hf, "layer_types")) {
    if (!hf["layer_types"].is_array()) return refuse(src, "layer_types", "expected an array");
    for (size_t i = 0; i < hf["layer_types"].size(); ++i)
      if (hf["layer_types"][i] != "full_attention")
        return refuse(src, absl::StrCat("layer_types[", i, "]"),
                      hf["layer_types"][i].dump() + " is not supported (full_attention only)");
  }
  return absl::OkStatus();
}

// rope_theta and the scaling: transformers 5 writes both into `rope_parameters`; the Hub's files
// have a top-level `rope_theta` and `rope_scaling` (null for plain RoPE).
absl::Status read_rope(const Json& hf, const std::string& src, ModelConfig& c) {
  LM_RETURN_IF_ERROR(get_number(hf, "rope_theta", c.rope_theta, false, src));
  const char* where = present(hf, "rope_parameters") ? "rope_parameters" : present(hf, "rope_scaling") ? "rope_scaling" : nullptr;
  if (where == nullptr) return absl::OkStatus();
  const Json& p = hf[where];
  const std::string pre = std::string(where) + ".";
  if (!p.is_object()) return refuse(src, where, "expected an object, got " + p.dump());
  LM_RETURN_IF_ERROR(get_number(p, "rope_theta", c.rope_theta, false, src, pre));
  const char* type_key = p.contains("rope_type") ? "rope_type" : "type";
  const Json type = p.value(type_key, Json("default"));
  double partial = 1.0;
  LM_RETURN_IF_ERROR(get_number(p, "partial_rotary_factor", partial, false, src, pre));
  if (partial != 1.0) return refuse(src, pre + "partial_rotary_factor", "partial rotary embeddings are not supported");
  if (type == "default") return absl::OkStatus();
  if (type != "llama3")
    return refuse(src, pre + type_key, type.dump() + " is not supported (lmforge implements default and llama3 rope)");
  RopeScaling& r = c.rope_scaling;
  r.type = "llama3";
  LM_RETURN_IF_ERROR(get_number(p, "factor", r.factor, true, src, pre));
  LM_RETURN_IF_ERROR(get_number(p, "low_freq_factor", r.low_freq_factor, true, src, pre));
  LM_RETURN_IF_ERROR(get_number(p, "high_freq_factor", r.high_freq_factor, true, src, pre));
  r.original_max_position_embeddings = c.max_seq_len;  // transformers' fallback: max_position_embeddings
  return get_int(p, "original_max_position_embeddings", r.original_max_position_embeddings, false, src, pre);
}

absl::Status read_shape(const Json& hf, const std::string& src, ModelConfig& c) {
  LM_RETURN_IF_ERROR(get_int(hf, "vocab_size", c.vocab_size, true, src));
  LM_RETURN_IF_ERROR(get_int(hf, "hidden_size", c.d_model, true, src));
  LM_RETURN_IF_ERROR(get_int(hf, "num_hidden_layers", c.n_layers, true, src));
  LM_RETURN_IF_ERROR(get_int(hf, "num_attention_heads", c.n_heads, true, src));
  LM_RETURN_IF_ERROR(get_int(hf, "intermediate_size", c.d_ff, true, src));
  c.n_kv_heads = c.n_heads;
  LM_RETURN_IF_ERROR(get_int(hf, "num_key_value_heads", c.n_kv_heads, false, src));
  LM_RETURN_IF_ERROR(get_int(hf, "max_position_embeddings", c.max_seq_len, false, src));
  int64_t head_dim = 0;
  LM_RETURN_IF_ERROR(get_int(hf, "head_dim", head_dim, false, src));
  // Only an explicit head_dim that differs from hidden/heads is kept: lmforge's own exports write
  // the implied one, and their config stays the preset's.
  if (head_dim > 0 && (c.n_heads <= 0 || c.d_model % c.n_heads != 0 || head_dim != c.d_model / c.n_heads))
    c.head_dim_override = head_dim;
  LM_RETURN_IF_ERROR(get_number(hf, "rms_norm_eps", c.norm_eps, false, src));
  LM_RETURN_IF_ERROR(get_bool(hf, "tie_word_embeddings", c.tie_embeddings, src));
  return get_number(hf, "initializer_range", c.init_std, false, src);
}

}  // namespace

bool is_hf_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

absl::StatusOr<ModelConfig> hf_model_config(const Json& hf, const std::string& src) {
  if (!hf.is_object()) return absl::InvalidArgumentError(src + ": expected a JSON object (an HF config.json)");
  LM_ASSIGN_OR_RETURN(const Family* f, family_of(hf, src));
  LM_RETURN_IF_ERROR(refuse_unsupported(hf, *f, src));
  ModelConfig c;
  c.architecture = f->name;
  c.attention_bias = c.architecture == "qwen2";  // Qwen2Attention: q/k/v with bias, o_proj without
  c.max_seq_len = f->max_positions;
  c.norm_eps = 1e-6;             // LlamaConfig / Qwen2Config defaults
  c.tie_embeddings = false;
  c.rope_theta = 10000.0;
  LM_RETURN_IF_ERROR(read_shape(hf, src, c));
  LM_RETURN_IF_ERROR(read_rope(hf, src, c));
  LM_RETURN_IF_ERROR(annotate(validate(c), src));
  return c;
}

absl::StatusOr<ModelConfig> read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  LM_ASSIGN_OR_RETURN(Json hf, read_json_file(path));
  return hf_model_config(hf, path);
}

namespace {

// The shard names of model.safetensors.index.json, and which tensor it says each holds.
absl::StatusOr<std::map<std::string, std::string>> read_index(const std::string& index) {
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(index));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return absl::DataLossError(index + ": weight_map: missing or not an object (re-download the index)");
  std::map<std::string, std::string> out;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      return absl::DataLossError(absl::StrCat(index, ": weight_map.", it.key(), ": expected a file name"));
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos)
      return absl::DataLossError(absl::StrCat(index, ": weight_map.", it.key(), ": \"", file, "\" is not a file in the folder"));
    out[it.key()] = file;
  }
  return out;
}

}  // namespace

absl::StatusOr<HfWeights> open_hf_weights(const std::string& dir) {
  const fs::path d(dir);
  const fs::path single = d / "model.safetensors", index = d / "model.safetensors.index.json";
  std::map<std::string, std::string> index_map;  // tensor -> shard (sharded checkpoints)
  std::vector<std::string> names;
  std::error_code ec;
  if (fs::exists(single, ec)) {
    names.push_back("model.safetensors");
  } else if (fs::exists(index, ec)) {
    LM_ASSIGN_OR_RETURN(index_map, read_index(index.string()));
    std::set<std::string> shards;
    for (const auto& [t, f] : index_map) shards.insert(f);
    names.assign(shards.begin(), shards.end());
  } else {
    const bool bin = fs::exists(d / "pytorch_model.bin", ec) || fs::exists(d / "pytorch_model.bin.index.json", ec);
    return absl::NotFoundError(absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json",
                                            bin ? " (only pytorch_model.bin: convert it to safetensors first)" : ""));
  }
  HfWeights ws;
  if (!fs::exists(single, ec)) ws.index = index.string();
  ws.files.reserve(names.size());
  for (const auto& n : names) {
    const fs::path p = d / n;
    if (!fs::exists(p, ec))
      return absl::NotFoundError(absl::StrCat(p.string(), ": missing; ", index.string(),
                                              " lists it (download the missing shard)"));
    LM_ASSIGN_OR_RETURN(auto f, MappedSafetensors::open(p.string()));
    ws.files.push_back(std::move(f));
  }
  for (size_t i = 0; i < ws.files.size(); ++i) {
    for (const auto& e : ws.files[i].entries()) {
      if (ws.where.count(e.name))
        return absl::DataLossError(absl::StrCat(ws.files[i].path(), ": tensor '", e.name, "' is also in ",
                                                ws.files[ws.where[e.name].first].path()));
      ws.where[e.name] = {i, &e};
    }
  }
  for (const auto& [t, f] : index_map) {
    auto it = ws.where.find(t);
    if (it == ws.where.end() || fs::path(ws.files[it->second.first].path()).filename() != f)
      return absl::DataLossError(absl::StrCat(index.string(), ": weight_map says tensor '", t, "' is in ", f,
                                              " but it is not there (a shard from another download?)"));
  }
  return ws;
}

namespace {

std::string dtype_name(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bf16" : t == torch::kFloat16 ? "fp16" : t == torch::kFloat32 ? "fp32" : c10::toString(t);
}

// The tensors the model has no place for and may ignore: the rotary tables older Llama
// conversions stored (recomputed from the config), a tied model's copy of the embedding.
bool ignorable(const std::string& name, bool tied) {
  const std::string inv = "rotary_emb.inv_freq";
  return (name.size() >= inv.size() && name.compare(name.size() - inv.size(), inv.size(), inv) == 0) ||
         (tied && name == "lm_head.weight");
}

}  // namespace

absl::Status load_hf_weights(const std::string& dir, Transformer& model) {
  LM_ASSIGN_OR_RETURN(HfWeights ws, open_hf_weights(dir));
  const NamedTensors params = module_state(*model);
  std::set<std::string> wanted;
  for (const auto& [name, t] : params) wanted.insert(name);
  for (const auto& [name, at] : ws.where) {
    if (!wanted.count(name) && !ignorable(name, model->config().tie_embeddings))
      return absl::FailedPreconditionError(absl::StrCat(ws.files[at.first].path(), ": tensor '", name,
                                                        "' has no place in the model config.json describes"));
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, dst] : params) {
    auto it = ws.where.find(name);
    if (it == ws.where.end())
      return absl::FailedPreconditionError(absl::StrCat(dir, ": tensor '", name, "' is missing from ",
                                                        ws.files.size() == 1 ? ws.files[0].path() : "every shard",
                                                        " (config.json describes another model, or a shard is incomplete)"));
    const MappedSafetensors& file = ws.files[it->second.first];
    const SafetensorsEntry& e = *it->second.second;
    if (e.shape != dst.sizes().vec()) {
      std::ostringstream m;
      m << file.path() << ": tensor '" << name << "' has shape " << c10::IntArrayRef(e.shape)
        << " but config.json gives " << dst.sizes();
      return absl::FailedPreconditionError(m.str());
    }
    if (e.dtype != torch::kBFloat16 && e.dtype != torch::kFloat16 && e.dtype != torch::kFloat32)
      return absl::FailedPreconditionError(absl::StrCat(file.path(), ": tensor '", name, "' is ", dtype_name(e.dtype),
                                                        " (expected bf16, fp16 or fp32)"));
    dst.copy_(file.view(e));  // converts to the parameter's dtype and device
    file.release(e);          // keeps the resident set at about one copy of the weights
  }
  return absl::OkStatus();
}

absl::StatusOr<HfCheckpointInfo> inspect_hf_checkpoint(const std::string& dir) {
  HfCheckpointInfo info;
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  LM_ASSIGN_OR_RETURN(Json hf, read_json_file(cfg_path));
  LM_ASSIGN_OR_RETURN(info.config, hf_model_config(hf, cfg_path));
  info.architecture = hf["architectures"][0].get<std::string>();
  LM_ASSIGN_OR_RETURN(HfWeights ws, open_hf_weights(dir));
  std::set<std::string> dtypes;
  std::error_code ec;
  for (const auto& f : ws.files) {
    info.weight_files.push_back(fs::path(f.path()).filename().string());
    info.file_bytes += static_cast<int64_t>(fs::file_size(f.path(), ec));
    for (const auto& e : f.entries()) dtypes.insert(dtype_name(e.dtype));
    info.tensors += static_cast<int64_t>(f.entries().size());
  }
  info.stored_dtypes = absl::StrJoin(dtypes, ", ");
  return info;
}

absl::StatusOr<Transformer> import_hf(const std::string& dir) {
  LM_ASSIGN_OR_RETURN(ModelConfig cfg, read_hf_config(dir));
  Transformer m(cfg, 0, /*draw_weights=*/false);  // every parameter is loaded below
  LM_RETURN_IF_ERROR(load_hf_weights(dir, m));
  return m;
}

absl::Status init_from_hf(const std::string& dir, Transformer& model) {
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  LM_ASSIGN_OR_RETURN(ModelConfig got, read_hf_config(dir));
  const ModelConfig& want = model->config();
  std::string diff;
  auto cmp = [&](const char* field, const char* hf_key, auto a, auto b) {
    if (a != b) diff += absl::StrCat("\n  model.", field, " is ", b, " here but ", hf_key, " is ", a, " in ", cfg_path);
  };
  cmp("architecture", "architectures", got.architecture, want.architecture);
  cmp("vocab_size", "vocab_size", got.vocab_size, want.vocab_size);
  cmp("d_model", "hidden_size", got.d_model, want.d_model);
  cmp("n_layers", "num_hidden_layers", got.n_layers, want.n_layers);
  cmp("n_heads", "num_attention_heads", got.n_heads, want.n_heads);
  cmp("n_kv_heads", "num_key_value_heads", got.n_kv_heads, want.n_kv_heads);
  cmp("head_dim", "head_dim", got.head_dim(), want.head_dim());
  cmp("d_ff", "intermediate_size", got.d_ff, want.d_ff);
  cmp("max_seq_len", "max_position_embeddings", got.max_seq_len, want.max_seq_len);
  cmp("rope_theta", "rope_theta", got.rope_theta, want.rope_theta);
  cmp("rope_scaling", "rope_scaling", to_json(got.rope_scaling).dump(), to_json(want.rope_scaling).dump());
  cmp("norm_eps", "rms_norm_eps", got.norm_eps, want.norm_eps);
  cmp("tie_embeddings", "tie_word_embeddings", got.tie_embeddings, want.tie_embeddings);
  cmp("attention_bias", "attention_bias", got.attention_bias, want.attention_bias);
  if (!diff.empty())
    return absl::FailedPreconditionError(absl::StrCat(
        dir, ": --init-from folder describes another model:", diff,
        "\n  (a new run takes the folder's model; pass the same --config as the exported run, or no model section)"));
  return load_hf_weights(dir, model);
}

}  // namespace lm::model
