// SentencePiece in a module of its own (liblm_spm.so), loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND)
// by spm_bridge.cpp: Debian's libsentencepiece carries a private copy of protobuf 3.14 whose
// exported symbols collide with the system libprotobuf 3.21 that LibTorch loads (a crash at start-up
// or "compiled against version 3.14.0" abort). Deep binding keeps each copy to its own users.
#include "tokenizer/spm_bridge.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace sentencepiece::logging {
void SetMinLogLevel(int v);  // exported by libsentencepiece, not declared in its public headers
}

namespace lm_spm_impl {
using lm::tokenizer::bridge::Sp;
using lm::tokenizer::bridge::SpInfo;

std::shared_ptr<const Sp> load_model(const std::string& bytes, std::string* error) {
  auto sp = std::make_shared<Sp>();
  auto st = sp->LoadFromSerializedProto(bytes);
  if (!st.ok()) {
    *error = st.ToString();
    return nullptr;
  }
  return sp;
}

void encode(const Sp& sp, std::string_view text, std::vector<int32_t>* ids) {
  ids->clear();
  std::vector<int> out;
  // (pointer, length): SentencePiece <= 0.1.96 (Ubuntu 22.04) takes its own absl::string_view,
  // which cannot be built from a std::string_view; both kinds can be built from these two.
  sp.Encode({text.data(), text.size()}, &out).IgnoreError();
  ids->assign(out.begin(), out.end());
}

std::string decode(const Sp& sp, const std::vector<int32_t>& ids) {
  std::vector<int> in(ids.begin(), ids.end());
  const int n = sp.GetPieceSize();
  for (int& id : in)
    if (id < 0 || id >= n) id = sp.unk_id();
  std::string out;
  sp.Decode(in, &out).IgnoreError();
  return out;
}

SpInfo info(const Sp& sp) {
  SpInfo i;
  i.vocab_size = sp.GetPieceSize();
  i.unk_id = sp.unk_id();
  i.bos_id = sp.bos_id();
  i.eos_id = sp.eos_id();
  i.pad_id = sp.pad_id();
  return i;
}

bool is_byte(const Sp& sp, int32_t id) { return sp.IsByte(id); }
bool is_unknown(const Sp& sp, int32_t id) { return sp.IsUnknown(id); }
bool is_control(const Sp& sp, int32_t id) { return sp.IsControl(id); }
std::string id_to_piece(const Sp& sp, int32_t id) { return sp.IdToPiece(id); }

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

bool train(const std::unordered_map<std::string, std::string>& kwargs, const std::vector<std::string>& sentences,
           std::string* model_bytes, std::string* error) {
  VectorIterator it(sentences);
  auto st = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, model_bytes);
  if (!st.ok()) {
    *error = st.ToString();
    return false;
  }
  return true;
}

// SentencePiece logs to std::cerr. Under RTLD_DEEPBIND it binds to libstdc++'s own std::cerr,
// which is never constructed when the executable holds a copy-relocated std::cerr (any program
// that uses std::cerr itself): a log line would crash. So its logging stays off (level 3 is
// above ERROR); every failure still comes back as a Status, and the trainer's own report covers
// what SentencePiece would have logged (e.g. lines that are too long: we split them first).
void set_log_level(int level) { sentencepiece::logging::SetMinLogLevel(level < 3 ? 3 : level); }

}  // namespace lm_spm_impl

extern "C" __attribute__((visibility("default"))) const lm::tokenizer::bridge::SpmApi* lm_spm_api() {
  using namespace lm_spm_impl;
  using lm::tokenizer::bridge::SpmApi;
  set_log_level(3);
  static const SpmApi api = {lm::tokenizer::bridge::kSpmApiVersion, &load_model, &encode, &decode, &info, &is_byte,
                             &is_unknown,    &is_control, &id_to_piece, &train, &set_log_level};
  return &api;
}
