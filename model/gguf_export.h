// `lmtrain export --format gguf`: a run's checkpoint as one GGUF file that llama.cpp loads
// (llama-cli -m model.gguf, llama-cpp-python). Written from C++ by model/gguf.h; no Python.
//
// Runs imported from an HF checkpoint (fit --init-from) too: architecture "llama" with GQA, tied
// embeddings, an explicit head_dim (attention.key_length/value_length) and llama3 rope scaling (a
// rope_freqs.weight tensor of per-frequency factors, as convert_hf_to_gguf.py writes it), or "qwen2"
// (q/k/v biases, no q/k permutation: llama.cpp's qwen2 graph rotates halves like lmforge); their
// byte-level BPE tokenizer as llama.cpp's "gpt2" tokenizer (model/gguf_bpe.h), Llama 2's
// tokenizer.model as SentencePiece ("llama"). Anything else is refused naming the field.
//
// Architecture "llama": tensor names token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
// attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output (absent when tied:
// llama.cpp then reuses token_embd). llama.cpp's llama graph rotates interleaved pairs (2i, 2i+1)
// (ROPE_TYPE_NORM) while lmforge, like transformers, rotates (i, i + D/2) (rotate_half), so
// attn_q/attn_k rows are permuted within each head exactly as convert_hf_to_gguf.py does.
// Tokenizer: the pieces, scores and piece types of the run's spm.model. tokenizer.ggml.model is "t5"
// (llama.cpp's Unigram tokenizer) for lmforge's unigram models: llama.cpp's "llama" tokenizer
// merges pairs greedily as SentencePiece-BPE does and gave lmforge's ids on only 34 of 96 test
// texts, "t5" on 96 (a character outside the vocabulary differs: lmforge falls back to bytes,
// llama.cpp's Unigram has no byte fallback and gives <unk>). add_bos_token is the tokenizer's
// framing (true for bos + text + eos, false for the old text + eos) and add_eos_token false
// (docs/export.md, "GGUF"; docs/data.md, "Framing").
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"
#include "model/hf_export.h"

namespace lm::model {

struct GgufExportOptions {
  std::string run_dir;
  int64_t step = -1;        // -1: the checkpoint `latest` points to
  std::string out;          // the .gguf file
  std::string type = "f16"; // f32 | f16 | q8_0 (norms stay f32, as llama.cpp's converter does)
  // Skips the q/k row permutation: only for the test that shows llama.cpp then disagrees.
  bool skip_rope_permutation = false;
  // tokenizer.ggml.model: "llama" (llama.cpp's SentencePiece-BPE tokenizer: greedy merges by
  // score), "t5" (its Unigram tokenizer: Viterbi, with spm.model's compiled normalization rules as
  // precompiled_charsmap), or "auto": t5 for a unigram spm.model (lmforge's default), llama for BPE.
  std::string tokenizer_model = "auto";
  bool force = false;  // write over an existing `out`
};

// What a SentencePiece ModelProto says about its vocabulary (sentencepiece_model.proto).
struct SpmVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;  // NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6 (= llama.cpp's)
  int32_t model_type = 1;      // TrainerSpec.model_type: UNIGRAM 1, BPE 2
  bool add_dummy_prefix = true, remove_extra_whitespaces = true;
  std::string precompiled_charsmap;  // NormalizerSpec.precompiled_charsmap: the compiled normalization rules
};
// Parses the protobuf wire format of spm.model; DataLoss naming `where` when it is not one.
absl::StatusOr<SpmVocab> read_spm_vocab(const std::string& bytes, const std::string& where);

// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"; empty for an unknown name.
std::string gguf_tensor_name(const std::string& lmforge_name);

// Rows of a q_proj/k_proj weight [n_head * D, in] from rotate_half order (i, i + D/2) to the
// interleaved order (2i, 2i+1) of llama.cpp's ROPE_TYPE_NORM (convert_hf_to_gguf.py, permute()).
torch::Tensor permute_rope_rows(const torch::Tensor& w, int64_t n_head);

// rope_freqs.weight of llama3 rope scaling: one factor per rotary frequency (head_dim / 2), by
// which llama.cpp divides it (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors).
std::vector<float> llama3_rope_factors(const ModelConfig& c);

// llama.cpp's general.file_type (LLAMA_FTYPE_ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7).
uint32_t gguf_file_type(const std::string& type);

absl::StatusOr<ExportResult> export_gguf(const GgufExportOptions& opt);

}  // namespace lm::model
