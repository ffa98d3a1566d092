#include "data/shard_set.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_format.h"

namespace lm::data {
namespace {

namespace fs = std::filesystem;

// Field-by-field strict reader for manifest.json (config.h's from_json has no std::map / Json).
class ObjectReader {
 public:
  ObjectReader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) status_ = wrong(j, path_, "an object");
  }
  template <class T>
  void operator()(const char* key, T& out, bool required = false) {
    seen_.insert(key);
    if (!status_.ok()) return;
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) status_ = absl::InvalidArgumentError(absl::StrCat(sub(key), ": missing"));
      return;
    }
    if constexpr (std::is_same_v<T, Json>) {
      out = *it;
    } else {
      status_ = from_json(*it, out, sub(key));
    }
  }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  absl::Status finish() {
    if (!status_.ok()) return status_;
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!seen_.count(it.key())) {
        return absl::InvalidArgumentError(absl::StrCat(sub(it.key()), ": unknown key"));
      }
    }
    return absl::OkStatus();
  }
  static absl::Status wrong(const Json& j, const std::string& path, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected ", want, ", got ", j.type_name()));
  }

 private:
  const Json& j_;
  std::string path_;
  std::set<std::string> seen_;
  absl::Status status_;
};

// Version 2 requires "framing"; version 1 predates it and its prepare wrote text + eos.
absl::Status framing_from_json(const Json& j, int version, tokenizer::Framing& out) {
  if (version == 1) {
    if (!j.is_null()) return absl::InvalidArgumentError("framing: not a key of version 1 (write version 2)");
    out = tokenizer::kLegacyFraming;
    return absl::OkStatus();
  }
  if (j.is_null())
    return absl::InvalidArgumentError("framing: missing (version 2 records it; re-run 'lmtrain prepare')");
  out = tokenizer::Framing{false, false};  // both keys are required: no default may stand in
  ObjectReader rd(j, "framing");
  rd("bos", out.bos, true);
  rd("eos", out.eos, true);
  return rd.finish();
}

// id, lang and weight are required (the sampler needs them); the counts default to 0.
absl::Status source_from_json(const Json& j, const std::string& path, SourceReport& r) {
  if (!j.is_object()) return ObjectReader::wrong(j, path, "an object");
  for (const char* key : {"id", "lang", "weight"})
    if (!j.contains(key)) return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": missing"));
  LM_RETURN_IF_ERROR(from_json(j, r, path));
  if (!(r.weight >= 0) || !std::isfinite(r.weight))
    return absl::InvalidArgumentError(absl::StrFormat("%s.weight: %g, expected a finite number >= 0", path, r.weight));
  return absl::OkStatus();
}

// The optional "sources" array (manifests before issue #21 have none).
absl::Status sources_from_json(const Json& j, std::vector<SourceReport>& out) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_array()) return ObjectReader::wrong(j, "sources", "an array");
  for (size_t i = 0; i < j.size(); ++i) {
    SourceReport r;
    LM_RETURN_IF_ERROR(source_from_json(j[i], absl::StrCat("sources[", i, "]"), r));
    out.push_back(std::move(r));
  }
  return absl::OkStatus();
}

std::string redo_hint() {
  return "re-run 'lmtrain prepare' with the run's tokenizer, or train with the tokenizer the shards "
         "were made with";
}

}  // namespace

Json manifest_to_json(const ShardManifest& m) {
  Json shards = Json::array();
  for (const auto& s : m.shards) {
    Json e{{"path", s.path}, {"lang", s.lang}, {"split", s.split}, {"tokens", s.tokens}, {"docs", s.docs}};
    if (!s.source.empty()) e["source"] = s.source;
    shards.push_back(std::move(e));
  }
  Json sources = Json::array();
  for (const auto& r : m.sources) sources.push_back(to_json(r));
  Json langs = Json::object();
  for (const auto& [lang, r] : m.languages) langs[lang] = to_json(r);
  Json weights = Json::object();
  for (const auto& [lang, w] : m.weights) weights[lang] = w;
  return Json{{"format", kManifestFormat},
              {"version", kManifestVersion},
              {"framing", to_json(m.framing)},
              {"tokenizer",
               {{"hash", m.tokenizer_hash},
                {"vocab_size", m.vocab_size},
                {"eos_id", m.eos_id},
                {"bos_id", m.bos_id},
                {"dir", m.tokenizer_dir}}},
              {"weights", weights},
              {"shards", shards},
              {"languages", langs},
              {"sources", sources},
              {"prepare", m.prepare}};
}

absl::StatusOr<ShardManifest> manifest_from_json(const Json& j, const std::string& source) {
  ShardManifest m;
  auto fail = [&](const absl::Status& st) { return annotate(st, source); };
  ObjectReader top(j, "");
  std::string format;
  int version = 0;
  Json tok, weights, shards, langs, sources, framing;
  top("format", format, true);
  top("version", version, true);
  top("framing", framing);
  top("tokenizer", tok, true);
  top("weights", weights);
  top("shards", shards, true);
  top("languages", langs);
  top("sources", sources);
  top("prepare", m.prepare);
  if (auto st = top.finish(); !st.ok()) return fail(st);
  if (format != kManifestFormat) {
    return fail(absl::InvalidArgumentError(absl::StrFormat(
        "format: '%s', expected '%s' (is this the folder written by 'lmtrain prepare'?)", format,
        kManifestFormat)));
  }
  if (version != kManifestVersion && version != 1) {
    return fail(absl::FailedPreconditionError(absl::StrFormat(
        "version: %d, this build reads 1 and %d (re-run 'lmtrain prepare')", version, kManifestVersion)));
  }
  LM_RETURN_IF_ERROR(fail(framing_from_json(framing, version, m.framing)));
  ObjectReader t(tok, "tokenizer");
  t("hash", m.tokenizer_hash, true);
  t("vocab_size", m.vocab_size, true);
  t("eos_id", m.eos_id);
  t("bos_id", m.bos_id);
  t("dir", m.tokenizer_dir);
  if (auto st = t.finish(); !st.ok()) return fail(st);
  if (m.vocab_size <= 0) {
    return fail(absl::InvalidArgumentError(
        absl::StrFormat("tokenizer.vocab_size: %d, expected a positive integer", m.vocab_size)));
  }
  if (!weights.is_null()) {
    if (!weights.is_object()) return fail(ObjectReader::wrong(weights, "weights", "an object"));
    for (auto it = weights.begin(); it != weights.end(); ++it) {
      double w = 0;
      LM_RETURN_IF_ERROR(fail(from_json(it.value(), w, "weights." + it.key())));
      if (!(w >= 0)) {
        return fail(absl::InvalidArgumentError(
            absl::StrFormat("weights.%s: %g, expected a non-negative number", it.key(), w)));
      }
      m.weights[it.key()] = w;
    }
  }
  if (!shards.is_array()) return fail(ObjectReader::wrong(shards, "shards", "an array"));
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardEntry e;
    ObjectReader s(shards[i], absl::StrCat("shards[", i, "]"));
    s("path", e.path, true);
    s("lang", e.lang, true);
    s("split", e.split, true);
    s("tokens", e.tokens, true);
    s("docs", e.docs, true);
    s("source", e.source);
    if (auto st = s.finish(); !st.ok()) return fail(st);
    if (e.split != "train" && e.split != "val") {
      return fail(absl::InvalidArgumentError(
          absl::StrFormat("shards[%d].split: '%s', expected 'train' or 'val'", i, e.split)));
    }
    m.shards.push_back(std::move(e));
  }
  if (!langs.is_null()) {
    if (!langs.is_object()) return fail(ObjectReader::wrong(langs, "languages", "an object"));
    for (auto it = langs.begin(); it != langs.end(); ++it) {
      LanguageReport r;
      LM_RETURN_IF_ERROR(fail(from_json(it.value(), r, "languages." + it.key())));
      m.languages[it.key()] = r;
    }
  }
  LM_RETURN_IF_ERROR(fail(sources_from_json(sources, m.sources)));
  return m;
}

std::string ShardSet::tokenizer_path() const {
  const fs::path p(manifest_.tokenizer_dir);
  if (p.empty() || p.is_absolute()) return p.string();
  return (fs::path(dir_) / p).lexically_normal().string();
}

absl::Status write_manifest(const std::string& dir, const ShardManifest& m) {
  return write_json_file((fs::path(dir) / kManifestName).string(), manifest_to_json(m));
}

namespace {

// A shard listed twice (a validation shard twice made its tokens count twice in every val loss):
// each path once (issue 40).
absl::Status check_listed_once(const ShardManifest& m, const std::string& path) {
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const std::string p = fs::path(m.shards[i].path).lexically_normal().string();
    auto [it, fresh] = first.emplace(p, i);
    if (!fresh)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shards[%d].path: '%s' is listed twice (also shards[%d], split %s); each shard may appear once, or its "
          "tokens count twice (re-run 'lmtrain prepare')",
          path, i, m.shards[i].path, it->second, m.shards[it->second].split));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardSet> ShardSet::open(const std::string& dir, bool verify_checksum) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  if (!fs::exists(path)) {
    return absl::NotFoundError(absl::StrFormat(
        "%s: no manifest: '%s' is not a shards folder (create one with 'lmtrain prepare --corpus "
        "corpus.json --tokenizer tok/ --out %s')",
        path, dir, dir));
  }
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  ShardSet set;
  set.dir_ = dir;
  LM_ASSIGN_OR_RETURN(set.manifest_, manifest_from_json(j, path));
  LM_RETURN_IF_ERROR(check_listed_once(set.manifest_, path));
  if (set.manifest_.shards.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": shards: the manifest lists no shards (re-run 'lmtrain prepare')"));
  }
  const auto& m = set.manifest_;
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const ShardEntry& e = m.shards[i];
    const std::string sp = (fs::path(dir) / e.path).string();
    LM_ASSIGN_OR_RETURN(ShardReader r, ShardReader::open(sp, verify_checksum));
    const ShardHeader& h = r.header();
    auto mismatch = [&](const char* field, const std::string& got, const std::string& want) {
      return absl::DataLossError(absl::StrFormat(
          "%s: %s: shard header has %s but %s shards[%d] says %s (the folder mixes shards of "
          "different prepare runs; re-run 'lmtrain prepare' into an empty folder)",
          sp, field, got, path, i, want));
    };
    if (h.n_tokens != e.tokens) {
      return mismatch("n_tokens", std::to_string(h.n_tokens), std::to_string(e.tokens));
    }
    if (h.n_docs != e.docs) return mismatch("n_docs", std::to_string(h.n_docs), std::to_string(e.docs));
    if (h.vocab_size != static_cast<uint32_t>(m.vocab_size)) {
      return mismatch("vocab_size", std::to_string(h.vocab_size), std::to_string(m.vocab_size));
    }
    if (h.tokenizer_hash != m.tokenizer_hash) {
      return mismatch("tokenizer_hash", "'" + h.tokenizer_hash + "'", "'" + m.tokenizer_hash + "'");
    }
    set.readers_.push_back(std::move(r));
  }
  return set;
}

absl::Status ShardSet::check_tokenizer(const std::string& hash, int32_t vocab) const {
  for (const auto& r : readers_) {
    const ShardHeader& h = r.header();
    if (h.vocab_size != static_cast<uint32_t>(vocab)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: vocab_size: shard has vocab %d but the run's tokenizer has %d (%s)", r.path(),
          h.vocab_size, vocab, redo_hint()));
    }
    if (h.tokenizer_hash != hash) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: tokenizer_hash: shard was made with tokenizer %s but the run's tokenizer is %s (%s)",
          r.path(), h.tokenizer_hash, hash, redo_hint()));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardSet::check_tokenizer(const tokenizer::Tokenizer& tok) const {
  LM_RETURN_IF_ERROR(check_tokenizer(tok.hash(), tok.vocab_size()));
  if (tok.framing() == manifest_.framing) return absl::OkStatus();
  const std::string meta = tok.dir().empty() ? std::string("the run's tokenizer")
                                             : (fs::path(tok.dir()) / tokenizer::kMetaFile).string();
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: framing: the shards hold each document as %s but %s says %s (re-run 'lmtrain prepare --tokenizer %s' "
      "into an empty folder, so that the shards are framed as the tokenizer says; docs/data.md, \"Framing\")",
      (fs::path(dir_) / kManifestName).string(), manifest_.framing.describe(), meta, tok.framing().describe(),
      tok.dir().empty() ? "TOKENIZER" : tok.dir()));
}

std::vector<std::string> ShardSet::languages(const std::string& split) const {
  std::set<std::string> out;
  for (const auto& e : manifest_.shards) {
    if (e.split == split) out.insert(e.lang);
  }
  return {out.begin(), out.end()};
}

uint64_t ShardSet::tokens(const std::string& lang, const std::string& split) const {
  uint64_t n = 0;
  for (const auto& e : manifest_.shards) {
    if (e.lang == lang && e.split == split) n += e.tokens;
  }
  return n;
}

std::vector<DatasetInfo> ShardSet::datasets() const {
  std::vector<DatasetInfo> out;
  for (const char* split : {"train", "val"}) {
    for (const auto& lang : languages(split)) {
      DatasetInfo d{lang, split, {}, 0};
      for (const auto& e : manifest_.shards) {
        if (e.lang != lang || e.split != split) continue;
        d.shards.push_back((fs::path(dir_) / e.path).string());
        d.tokens += e.tokens;
      }
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::vector<ShardReader> ShardSet::readers(const std::string& lang, const std::string& split) const {
  std::vector<ShardReader> out;
  for (size_t i = 0; i < manifest_.shards.size(); ++i) {
    if (manifest_.shards[i].lang == lang && manifest_.shards[i].split == split) {
      out.push_back(readers_[i]);
    }
  }
  return out;
}

std::vector<std::string> ShardSet::sources(const std::string& lang, const std::string& split) const {
  std::vector<std::string> out;
  for (const auto& e : manifest_.shards) {
    if (e.lang == lang && e.split == split && std::find(out.begin(), out.end(), e.source) == out.end())
      out.push_back(e.source);
  }
  return out;
}

std::vector<ShardReader> ShardSet::readers(const std::string& lang, const std::string& split,
                                           const std::string& source) const {
  std::vector<ShardReader> out;
  for (size_t i = 0; i < manifest_.shards.size(); ++i) {
    const ShardEntry& e = manifest_.shards[i];
    if (e.lang == lang && e.split == split && e.source == source) out.push_back(readers_[i]);
  }
  return out;
}

const SourceReport* ShardSet::source_report(const std::string& id) const {
  for (const auto& r : manifest_.sources) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

}  // namespace lm::data
