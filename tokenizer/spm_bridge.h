// SentencePiece behind a narrow interface. Only spm_module.cpp includes SentencePiece's headers:
// Debian's sentencepiece 0.1.97 declares `namespace absl { using std::string_view; }`, which
// clashes with the real Abseil in one translation unit, so this interface uses only the standard
// library (errors as strings). The module is loaded at run time (spm_bridge.cpp explains why);
// it is looked up at $LM_SPM_MODULE, beside the executable, in ../lib, then in the build tree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace lm::tokenizer::bridge {

using Sp = sentencepiece::SentencePieceProcessor;

// Parses a serialized ModelProto; null with `error` set when it is not a valid model.
std::shared_ptr<const Sp> load_model(const std::string& bytes, std::string* error);

void encode(const Sp& sp, std::string_view text, std::vector<int32_t>* ids);
std::string decode(const Sp& sp, const std::vector<int32_t>& ids);

struct SpInfo {
  int32_t vocab_size = 0, unk_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;
  std::string model_type;      // "UNIGRAM", "BPE", ...
  std::string normalizer_name; // "user_defined" for our rule table
};
SpInfo info(const Sp& sp);
bool is_byte(const Sp& sp, int32_t id);
bool is_unknown(const Sp& sp, int32_t id);
bool is_control(const Sp& sp, int32_t id);
std::string id_to_piece(const Sp& sp, int32_t id);

// Trains from in-memory sentences with SentencePiece's own option names (kwargs as in
// spm_train --key=value). True on success with the serialized model in `model_bytes`.
bool train(const std::unordered_map<std::string, std::string>& kwargs,
           const std::vector<std::string>& sentences, std::string* model_bytes, std::string* error);

// SentencePiece's own log level; kept at 3 (silent) whatever is asked: see spm_module.cpp.
void set_log_level(int level);

// Empty when the SentencePiece module loads, else why not (every call above then fails softly:
// load_model and train return the reason as their error).
std::string module_error();

// The function table liblm_spm.so exports as `lm_spm_api` (see spm_module.cpp).
inline constexpr int kSpmApiVersion = 1;
struct SpmApi {
  int version;
  std::shared_ptr<const Sp> (*load_model)(const std::string&, std::string*);
  void (*encode)(const Sp&, std::string_view, std::vector<int32_t>*);
  std::string (*decode)(const Sp&, const std::vector<int32_t>&);
  SpInfo (*info)(const Sp&);
  bool (*is_byte)(const Sp&, int32_t);
  bool (*is_unknown)(const Sp&, int32_t);
  bool (*is_control)(const Sp&, int32_t);
  std::string (*id_to_piece)(const Sp&, int32_t);
  bool (*train)(const std::unordered_map<std::string, std::string>&, const std::vector<std::string>&, std::string*,
                std::string*);
  void (*set_log_level)(int);
};

}  // namespace lm::tokenizer::bridge
