// libFuzzer target: the strict JSON config readers on arbitrary text. Byte 0 picks the reader,
// the rest is the file's text, parsed by parse_json (core/config.cpp) and then read by:
//   0: the `lmtrain fit --config` file {"model": ModelConfig, "train": TrainConfig} with
//      from_json, then model::validate and train::resolve (what cmd_fit does with it);
//   1: corpus.json (CorpusManifest) with from_json and validate_manifest;
//   2: shards/manifest.json (data::manifest_from_json).
// Every error must come back as a Status; a crash, an uncaught exception or undefined behaviour
// (UBSan) is a finding.
#include <filesystem>
#include <string>

#include "core/config.h"
#include "corpus/corpus.h"
#include "data/shard_set.h"
#include "model/config.h"
#include "train/config.h"

namespace {

// Mirrors RunFile in app/cmd_fit.cpp.
struct RunFile {
  lm::model::ModelConfig model;
  lm::train::TrainConfig train;
  template <class V>
  void visit(V& v) {
    v("model", model);
    v("train", train);
  }
};

// validate_manifest globs every path on the real file system; keep that inside an empty
// folder so the fuzzer cannot make it walk the whole disk ("/*/*/*/*").
bool paths_are_contained(const lm::data::CorpusManifest& m) {
  for (const auto& s : m.sources)
    for (const auto& p : s.paths)
      if (p.empty() || p[0] == '/' || p.find("..") != std::string::npos || p.size() > 64) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 3;
  auto j = lm::parse_json(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), "fuzz.json");
  if (!j.ok()) return 0;
  if (which == 0) {
    RunFile rf;
    if (!lm::from_json(*j, rf).ok()) return 0;
    if (!lm::model::validate(rf.model).ok()) return 0;
    (void)lm::train::resolve(rf.train, rf.model, 1);
    (void)lm::to_json(rf).dump();
  } else if (which == 1) {
    lm::data::CorpusManifest m;
    if (!lm::from_json(*j, m, "corpus.json").ok()) return 0;
    static const std::string empty_dir = [] {
      auto d = std::filesystem::temp_directory_path() / ("lm_fuzz_empty." + std::to_string(::getpid()));
      std::filesystem::create_directories(d);
      return d.string();
    }();
    m.base_dir = empty_dir;
    if (paths_are_contained(m)) (void)lm::data::validate_manifest(m, "corpus.json");
  } else {
    auto m = lm::data::manifest_from_json(*j, "manifest.json");
    if (m.ok()) (void)lm::data::manifest_to_json(*m).dump();
  }
  return 0;
}
