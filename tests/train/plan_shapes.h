// Model shapes of issue 39 for lmtrain plan's tests: OpenLLaMA-3B and Llama-2-7B (untied).
#pragma once

#include "model/config.h"

namespace lm::train {

// OpenLLaMA-3B's shape (issue 39): plain DDP on 8 GPUs keeps everything on every GPU, 81.5 GB at 1 x 2048.
inline model::ModelConfig open_llama_3b() {
  model::ModelConfig c = *model::preset("1b");
  c.preset = "custom";
  c.vocab_size = 32000;
  c.d_model = 3200;
  c.n_layers = 26;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.d_ff = 8640;
  c.max_seq_len = 2048;
  c.tie_embeddings = false;
  return c;
}

// Llama-2-7B's shape (issue 39): untied, 6.7B parameters.
inline model::ModelConfig llama2_7b() {
  model::ModelConfig c = open_llama_3b();
  c.d_model = 4096;
  c.n_layers = 32;
  c.d_ff = 11008;
  c.max_seq_len = 4096;
  return c;
}

}  // namespace lm::train
