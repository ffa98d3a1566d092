#include "model/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/file.h"
#include "core/run_folder.h"
#include "model/checkpoint_reader.h"
#include "model/gguf_bpe.h"
#include "model/safetensors.h"

namespace lm::model {
namespace fs = std::filesystem;
namespace {

// Protocol Buffers wire format (protobuf.dev/programming-guides/encoding): varint tags,
// wire types 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
class ProtoReader {
 public:
  ProtoReader(const char* p, size_t n) : p_(p), end_(p + n) {}
  bool done() const { return p_ >= end_; }
  bool ok() const { return ok_; }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return ok_ = false;
  }
  // Next field: number and wire type; the value is read by one of the calls below.
  bool tag(uint32_t& field, uint32_t& wire) {
    uint64_t t;
    if (!varint(t)) return false;
    field = static_cast<uint32_t>(t >> 3);
    wire = static_cast<uint32_t>(t & 7);
    return true;
  }
  bool bytes(std::string_view& out) {
    uint64_t n;
    if (!varint(n) || n > static_cast<uint64_t>(end_ - p_)) return ok_ = false;
    out = std::string_view(p_, n);
    p_ += n;
    return true;
  }
  bool fixed32(uint32_t& v) {
    if (end_ - p_ < 4) return ok_ = false;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return true;
  }
  bool skip(uint32_t wire) {
    uint64_t v;
    std::string_view s;
    uint32_t f;
    switch (wire) {
      case 0: return varint(v);
      case 1: if (end_ - p_ < 8) return ok_ = false; p_ += 8; return true;
      case 2: return bytes(s);
      case 5: return fixed32(f);
    }
    return ok_ = false;
  }

 private:
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

// ModelProto.SentencePiece { string piece = 1; float score = 2; Type type = 3 [default NORMAL]; }
bool read_piece(std::string_view msg, SpmVocab& v) {
  ProtoReader r(msg.data(), msg.size());
  std::string piece;
  float score = 0.0f;
  int32_t type = 1;
  uint32_t field, wire;
  while (!r.done() && r.tag(field, wire)) {
    if (field == 1 && wire == 2) {
      std::string_view s;
      if (!r.bytes(s)) return false;
      piece.assign(s);
    } else if (field == 2 && wire == 5) {
      uint32_t bits;
      if (!r.fixed32(bits)) return false;
      std::memcpy(&score, &bits, 4);
    } else if (field == 3 && wire == 0) {
      uint64_t t;
      if (!r.varint(t)) return false;
      type = static_cast<int32_t>(t);
    } else if (!r.skip(wire)) {
      return false;
    }
  }
  v.pieces.push_back(std::move(piece));
  v.scores.push_back(score);
  v.types.push_back(type);
  return r.ok();
}

// Reads the varint fields `wanted` (field -> out) of a sub-message, skipping the rest.
bool read_varints(std::string_view msg, std::initializer_list<std::pair<uint32_t, uint64_t*>> wanted) {
  ProtoReader r(msg.data(), msg.size());
  uint32_t field, wire;
  while (!r.done() && r.tag(field, wire)) {
    bool used = false;
    for (auto& [f, out] : wanted) {
      if (f == field && wire == 0) {
        if (!r.varint(*out)) return false;
        used = true;
      }
    }
    if (!used && !r.skip(wire)) return false;
  }
  return r.ok();
}

// The last value of length-delimited field `field` of a message (empty when absent).
bool read_bytes_field(std::string_view msg, uint32_t want, std::string& out) {
  ProtoReader r(msg.data(), msg.size());
  uint32_t field, wire;
  while (!r.done() && r.tag(field, wire)) {
    if (field == want && wire == 2) {
      std::string_view s;
      if (!r.bytes(s)) return false;
      out.assign(s);
    } else if (!r.skip(wire)) {
      return false;
    }
  }
  return r.ok();
}

// "bf16"-style names of the CLI -> ggml types of 2-D weights.
absl::StatusOr<model::GgmlType> weight_type(const std::string& type) {
  if (type == "f32") return model::GgmlType::kF32;
  if (type == "f16") return model::GgmlType::kF16;
  if (type == "q8_0") return model::GgmlType::kQ8_0;
  return absl::InvalidArgumentError("--gguf-type: expected f32, f16 or q8_0, got '" + type + "'");
}

// general.* and <arch>.* as convert_hf_to_gguf.py writes them (LlamaModel / Qwen2Model).
void add_model_metadata(model::GgufWriter& w, const model::ModelConfig& c, const std::string& name,
                        const std::string& type) {
  const std::string& a = c.architecture;  // "llama" or "qwen2": llama.cpp's names too
  w.add_string("general.architecture", a);
  w.add_string("general.name", name);
  w.add_u32("general.file_type", gguf_file_type(type));
  w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, as the converter writes
  w.add_u32("general.alignment", static_cast<uint32_t>(model::kGgufAlignment));
  w.add_u32(a + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.add_u32(a + ".context_length", static_cast<uint32_t>(c.max_seq_len));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(c.d_model));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(c.n_layers));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(c.d_ff));
  w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  if (c.head_dim_override > 0) {  // head_dim != d_model / n_heads (Llama 3.2 3B): llama.cpp reads it here
    w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim()));
    w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim()));
  }
  w.add_f32(a + ".rope.freq_base", static_cast<float>(c.rope_theta));
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));
}

void add_tokenizer_metadata(model::GgufWriter& w, const SpmVocab& v, const SpecialTokens& sp, const std::string& model) {
  w.add_string("tokenizer.ggml.model", model);
  w.add_string_array("tokenizer.ggml.tokens", v.pieces);
  w.add_f32_array("tokenizer.ggml.scores", v.scores);
  w.add_i32_array("tokenizer.ggml.token_type", v.types);
  w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(sp.bos_id));
  w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(sp.eos_id));
  w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(sp.unk_id));
  w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(sp.pad_id));
  // The tokenizer's framing (tokenizer.json): with bos + text + eos llama.cpp starts a prompt with BOS
  // as a document starts in training; with the old text + eos the prompt is plain text.
  w.add_bool("tokenizer.ggml.add_bos_token", sp.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  w.add_bool("tokenizer.ggml.add_space_prefix", v.add_dummy_prefix);
  if (model == "t5") {
    w.add_bool("tokenizer.ggml.remove_extra_whitespaces", v.remove_extra_whitespaces);
    if (!v.precompiled_charsmap.empty()) w.add_u8_array("tokenizer.ggml.precompiled_charsmap", v.precompiled_charsmap);
  }
}

}  // namespace

absl::StatusOr<SpmVocab> read_spm_vocab(const std::string& bytes, const std::string& where) {
  SpmVocab v;
  ProtoReader r(bytes.data(), bytes.size());
  uint32_t field, wire;
  auto bad = [&](const char* what) {
    return absl::DataLossError(absl::StrCat(where, ": not a SentencePiece model (", what,
                                            "); re-run 'lmtrain tokenizer' or copy the run's tokenizer again"));
  };
  while (!r.done() && r.tag(field, wire)) {
    std::string_view msg;
    if (wire == 2 && (field == 1 || field == 2 || field == 3)) {
      if (!r.bytes(msg)) return bad("truncated field");
      if (field == 1 && !read_piece(msg, v)) return bad("broken piece");
      uint64_t model_type = 1, dummy = 1, extra = 1;
      if (field == 2) {  // TrainerSpec { ModelType model_type = 3; }
        if (!read_varints(msg, {{3, &model_type}})) return bad("broken trainer_spec");
        v.model_type = static_cast<int32_t>(model_type);
      }
      if (field == 3) {  // NormalizerSpec { bytes precompiled_charsmap = 2; bool add_dummy_prefix = 3; bool remove_extra_whitespaces = 4; }
        if (!read_varints(msg, {{3, &dummy}, {4, &extra}})) return bad("broken normalizer_spec");
        if (!read_bytes_field(msg, 2, v.precompiled_charsmap)) return bad("broken normalizer_spec");
        v.add_dummy_prefix = dummy != 0;
        v.remove_extra_whitespaces = extra != 0;
      }
    } else if (!r.skip(wire)) {
      return bad("truncated field");
    }
  }
  if (!r.ok()) return bad("truncated field");
  if (v.pieces.empty()) return bad("no pieces");
  return v;
}

std::string gguf_tensor_name(const std::string& n) {
  static const std::pair<const char*, const char*> kFixed[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (auto& [from, to] : kFixed)
    if (n == from) return to;
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm", "attn_norm"},     {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},       {"self_attn.o_proj", "attn_output"},
      {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
  };
  // Qwen2's q/k/v biases: blk.N.attn_q.bias (llama.cpp's LLM_TENSOR_ATTN_Q + ".bias").
  static const std::regex kLayerName(R"(model\.layers\.(\d+)\.(.+)\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(n, m, kLayerName)) return "";
  for (auto& [from, to] : kLayer)
    if (m[2] == from) return absl::StrCat("blk.", m[1].str(), ".", to, ".", m[3].str());
  return "";
}

torch::Tensor permute_rope_rows(const torch::Tensor& w, int64_t n_head) {
  // w: [n_head * D, in] -> [n_head, 2, D/2, in] -> swap (2, D/2) -> [n_head * D, in]
  TORCH_CHECK(w.dim() == 2 && w.size(0) % (2 * n_head) == 0, "permute_rope_rows: weight ", w.sizes(),
              " does not split into ", n_head, " heads of even size");
  return w.reshape({n_head, 2, w.size(0) / n_head / 2, w.size(1)}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

uint32_t gguf_file_type(const std::string& type) {
  if (type == "f16") return 1;
  if (type == "q8_0") return 7;
  return 0;
}

std::vector<float> llama3_rope_factors(const model::ModelConfig& c) {
  // convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors: llama.cpp divides each rotary
  // frequency by its factor, which gives transformers' _compute_llama3_parameters.
  const auto& r = c.rope_scaling;
  const int64_t dim = c.head_dim();
  const double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
  const double high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(i) / static_cast<float>(dim));
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      out.push_back(static_cast<float>(1 / ((1 - smooth) / r.factor + smooth)));
    }
  }
  return out;
}

namespace {

// What no llama.cpp graph computes as lmforge does is refused, naming the field.
absl::Status check_gguf_model(const model::ModelConfig& mc, const std::string& run_dir) {
  auto refuse = [&](const std::string& what) {
    return absl::UnimplementedError(absl::StrCat(run_dir, "/config.json: ", what,
                                                 ": the GGUF export cannot write it (export --format hf instead)"));
  };
  if (mc.architecture != "llama" && mc.architecture != "qwen2")
    return refuse("model.architecture \"" + mc.architecture + "\" (llama and qwen2 are written)");
  if (mc.rope_scaling.type != "default" && !(mc.rope_scaling.type == "llama3" && mc.architecture == "llama"))
    return refuse("model.rope_scaling.type \"" + mc.rope_scaling.type + "\" with architecture " + mc.architecture +
                  " (llama3 scaling is written for llama: rope_freqs.weight)");
  if (mc.attention_bias && mc.architecture != "qwen2")
    return refuse("model.attention_bias true with architecture llama (llama.cpp's llama has no q/k/v biases)");
  return absl::OkStatus();
}

// The run's tokenizer (tokenizer/tokenizer.json names its model file): lmforge's spm.model or an
// imported Llama 2 tokenizer.model as SentencePiece, an imported hf-tokenizer.json as byte-level BPE.
absl::Status add_run_tokenizer(model::GgufWriter& w, const GgufExportOptions& opt, const model::ModelConfig& mc) {
  const fs::path tok_dir = RunFolder(opt.run_dir).tokenizer();
  LM_ASSIGN_OR_RETURN(SpecialTokens sp, read_special_tokens((tok_dir / "tokenizer.json").string()));
  const auto model_file = RunFolder::tokenizer_model_file(tok_dir.string());
  const fs::path file = tok_dir / (model_file.ok() ? *model_file : std::string("spm.model"));
  if (!fs::exists(file))
    return absl::NotFoundError(file.string() + ": the run has no tokenizer copy (re-run 'lmtrain fit', which copies it)");
  LM_ASSIGN_OR_RETURN(std::string bytes, read_file(file.string()));
  if (file.filename() == "hf-tokenizer.json") {
    LM_ASSIGN_OR_RETURN(BpeVocab v, read_bpe_vocab(bytes, mc.vocab_size, file.string()));
    LM_ASSIGN_OR_RETURN(std::string pre, llama_cpp_pre(v.pattern, v.ignore_merges, file.string()));
    add_bpe_tokenizer_metadata(w, v, pre, sp);
    return absl::OkStatus();
  }
  LM_ASSIGN_OR_RETURN(SpmVocab vocab, read_spm_vocab(bytes, file.string()));
  if (static_cast<int64_t>(vocab.pieces.size()) != mc.vocab_size)
    return absl::FailedPreconditionError(absl::StrCat(
        file.string(), ": ", vocab.pieces.size(), " pieces but the model has vocab_size ", mc.vocab_size, " in ",
        (fs::path(opt.run_dir) / "config.json").string(), " (the run's tokenizer copy does not belong to this model)"));
  std::string tok_model = opt.tokenizer_model;
  if (tok_model == "auto") tok_model = vocab.model_type == 1 ? "t5" : "llama";
  if (tok_model != "t5" && tok_model != "llama")
    return absl::InvalidArgumentError("--gguf-tokenizer: expected auto, llama or t5, got '" + tok_model + "'");
  add_tokenizer_metadata(w, vocab, sp, tok_model);
  return absl::OkStatus();
}

// The model's tensors under llama.cpp's names; llama's q/k rows permuted to its interleaved rotary
// (Qwen2's graph rotates halves as lmforge does: LLAMA_ROPE_TYPE_NEOX), llama3 scaling's factors
// as rope_freqs.weight. Returns the parameter count.
absl::StatusOr<int64_t> add_model_tensors(model::GgufWriter& w, model::Transformer& model, const model::ModelConfig& mc,
                                          const GgufExportOptions& opt, const std::string& ckpt, model::GgmlType wtype) {
  const bool permute = mc.architecture == "llama" && !opt.skip_rope_permutation;
  int64_t params = 0;
  for (auto& [name, t] : model::module_state(*model)) {
    const std::string gname = gguf_tensor_name(name);
    if (gname.empty())
      return absl::InternalError(absl::StrCat(ckpt, ": tensor ", name, " has no GGUF name (update gguf_tensor_name)"));
    params += t.numel();
    torch::Tensor x = t.detach();
    if (permute && name.find("self_attn.q_proj") != std::string::npos) x = permute_rope_rows(x, mc.n_heads);
    if (permute && name.find("self_attn.k_proj") != std::string::npos) x = permute_rope_rows(x, mc.n_kv_heads);
    // Norm weights and biases stay f32 (convert_hf_to_gguf.py does the same; tiny, added in f32).
    const model::GgmlType type = x.dim() == 1 ? model::GgmlType::kF32 : wtype;
    LM_RETURN_IF_ERROR(annotate(w.add_tensor(gname, x, type), opt.out));
  }
  if (mc.rope_scaling.type == "llama3") {
    const std::vector<float> f = llama3_rope_factors(mc);
    LM_RETURN_IF_ERROR(annotate(w.add_tensor("rope_freqs.weight", torch::tensor(f), model::GgmlType::kF32), opt.out));
  }
  return params;
}

}  // namespace

absl::StatusOr<ExportResult> export_gguf(const GgufExportOptions& opt) {
  if (opt.run_dir.empty() || opt.out.empty()) return absl::InvalidArgumentError("export needs --run and --out");
  LM_ASSIGN_OR_RETURN(model::GgmlType wtype, weight_type(opt.type));
  const fs::path run(opt.run_dir);
  LM_RETURN_IF_ERROR(check_export_target(opt.out, /*folder=*/false, opt.force));
  LM_ASSIGN_OR_RETURN(TrainedModel tm, load_trained_model(opt.run_dir, opt.step));
  const model::ModelConfig& mc = tm.config;
  LM_RETURN_IF_ERROR(check_gguf_model(mc, opt.run_dir));
  model::GgufWriter w;
  add_model_metadata(w, mc, run.filename().string(), opt.type);
  LM_RETURN_IF_ERROR(add_run_tokenizer(w, opt, mc));
  LM_ASSIGN_OR_RETURN(const int64_t params, add_model_tensors(w, tm.model, mc, opt, tm.checkpoint, wtype));
  std::error_code ec;
  if (fs::path(opt.out).has_parent_path()) fs::create_directories(fs::path(opt.out).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat(opt.out, ": cannot create its folder: ", ec.message()));
  LM_RETURN_IF_ERROR(w.write(opt.out));
  ExportResult r;
  r.out = opt.out;
  r.checkpoint = tm.checkpoint;
  r.step = tm.trainer["step"].get<int64_t>();
  r.params = params;
  r.bytes = static_cast<int64_t>(fs::file_size(opt.out, ec));
  return r;
}

}  // namespace lm::model
