// Helpers for the data tests: temp folders and synthetic shard sets (no tokenizer needed).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/shard_set.h"

#define LM_ASSERT_OK(expr)                                   \
  do {                                                       \
    const ::absl::Status lm_st_ = (expr);                    \
    ASSERT_TRUE(lm_st_.ok()) << lm_st_.message();            \
  } while (0)

namespace lm::data::testing {

// A fresh folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lm_data_test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct SynthShard {
  std::string lang;
  std::string split;
  std::vector<int32_t> tokens;
  std::vector<uint64_t> offsets;  // n_docs + 1; empty = one document
  std::string source;             // corpus source id; empty = the language is one source
};

inline constexpr const char* kTestHash = "0123456789abcdef";

// Writes the shards and a manifest.json into `dir`.
inline absl::Status write_synthetic_set(const std::string& dir, const std::vector<SynthShard>& shards,
                                        uint32_t vocab, const std::map<std::string, double>& weights = {},
                                        const std::vector<SourceReport>& sources = {}) {
  ShardManifest m;
  m.tokenizer_hash = kTestHash;
  m.vocab_size = static_cast<int32_t>(vocab);
  m.eos_id = 0;
  m.weights = weights;
  m.sources = sources;
  int i = 0;
  for (const auto& s : shards) {
    const std::string name = s.lang + "." + s.split + "." + std::to_string(i++) + ".lmtok";
    LM_RETURN_IF_ERROR(write_shard(dir + "/" + name, s.tokens, s.offsets, vocab, kTestHash));
    const uint64_t docs = s.offsets.empty() ? 1 : s.offsets.size() - 1;
    m.shards.push_back({name, s.lang, s.split, s.tokens.size(), docs, s.source});
  }
  return write_manifest(dir, m);
}

// tokens[i] = base + i: every window is identified by its first token.
inline std::vector<int32_t> iota_tokens(size_t n, int32_t base = 0) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<int32_t>(i);
  return v;
}

}  // namespace lm::data::testing
