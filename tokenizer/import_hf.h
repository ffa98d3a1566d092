// A checkpoint's own tokenizer as an lmforge tokenizer folder: 'lmtrain tokenizer --import HF_DIR'.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace lm::tokenizer {

struct ImportOptions {
  std::string hf_dir;  // an HF checkpoint (or tokenizer) folder
  std::string out;     // the tokenizer folder to write
  bool force = false;  // replace a non-empty `out`
};

// Reads HF_DIR's tokenizer.json (byte-level BPE: Llama 3, Qwen2) or, when there is none or it is
// not byte-level, its SentencePiece tokenizer.model (Llama 2), and writes `out`: the model file as
// it is (hf-tokenizer.json or tokenizer.model) and tokenizer.json with the checkpoint's ids:
//   BOS   the post-processor template's (tokenizer.model: the model's own), framing.bos when the
//         checkpoint adds it (template; tokenizer_config.json add_bos_token for SentencePiece);
//   EOS   tokenizer_config.json eos_token, else config.json eos_token_id (the model's own for
//         SentencePiece); every document ends with it;
//   vocab config.json vocab_size (the embedding rows), which must hold every tokenizer id.
// Bad input (no tokenizer, an unsupported one, a vocabulary larger than the checkpoint's, no EOS)
// is an error naming the file and field; nothing is written then. Returns the loaded folder.
absl::StatusOr<Tokenizer> import_hf_tokenizer(const ImportOptions& o);

}  // namespace lm::tokenizer
