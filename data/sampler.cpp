#include "data/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"

namespace lm::data {
namespace {

constexpr const char* kCursorKind = "lmforge.batch_sampler";
constexpr int kCursorVersion = 1;

// splitmix64 finaliser (Steele, Lea & Flood 2014): a strong 64-bit mixer for counter-based draws.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_string(const std::string& s) { return fnv1a64(s.data(), s.size()); }

}  // namespace

uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key) {
  if (n <= 1) return 0;
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  if (bits % 2 == 1) ++bits;  // balanced halves; the domain stays below 4n, so walks are short
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = i;
  do {
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix64(r ^ key ^ (round * 0xd6e8feb86659fd93ULL)) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half) | r;
  } while (x >= n);
  return x;
}

namespace {

// Window starts of a shard of `n` tokens with document offsets `offs`: each window starts at a
// document start; the next one starts at the last document start inside this window (so a
// cut-off document is seen whole next), or T later inside a long one.
std::vector<uint64_t> doc_aligned_starts(const std::vector<uint64_t>& offs, uint64_t n, uint64_t T) {
  std::vector<uint64_t> starts;
  uint64_t p = 0;
  while (p + T + 1 <= n) {
    starts.push_back(p);
    auto it = std::upper_bound(offs.begin(), offs.end(), p + T);  // first start > p + T
    const uint64_t q = *(it - 1);                                  // last start <= p + T
    p = q > p ? q : p + T;
  }
  return starts;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, double>>> BatchSampler::stream_weights(
    const ShardSet& set, const SamplerConfig& cfg, const std::string& lang) {
  // A per-language total, shared among the language's sources (those with shards) by their weights
  // (issue 31: an empty source's weight stays with its language, so the language mix is the asked one).
  double lang_total = -1;
  const auto& recorded = set.weights();
  if (!cfg.weights.empty()) {
    lang_total = cfg.weights.count(lang) ? cfg.weights.at(lang) : 0.0;
  } else if (set.manifest().sources.empty()) {  // older manifest: per-language weights or token counts
    lang_total = recorded.empty() ? static_cast<double>(set.tokens(lang, "train"))
                                  : (recorded.count(lang) ? recorded.at(lang) : 0.0);
  } else {  // the language keeps all its weight: a source with no shards leaves its weight to its language
    lang_total = 0;
    for (const SourceReport& s : set.manifest().sources) lang_total += s.lang == lang ? s.weight : 0.0;
  }
  std::vector<std::pair<std::string, double>> out;
  double sum = 0;
  for (const std::string& src : set.sources(lang, "train")) {
    double w = 1.0;  // shards that name no source: the whole language is one
    if (!src.empty()) {
      const SourceReport* r = set.source_report(src);
      if (!r) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s/%s: shards of source '%s' but its sources list has no such id (re-run 'lmtrain prepare')",
            set.dir(), kManifestName, src));
      }
      w = r->weight;
    }
    out.emplace_back(src, w);
    sum += w;
  }
  if (lang_total >= 0) {
    for (auto& [src, w] : out) w = sum > 0 ? lang_total * w / sum : 0.0;
  }
  return out;
}

// Adds the stream of (lang, source) to `data`; false when it has not one window of T + 1 tokens.
absl::StatusOr<bool> BatchSampler::add_stream(const ShardSet& set, const SamplerConfig& cfg, const std::string& lang,
                                              const std::string& source, double weight, Data* data) {
  const uint64_t T = static_cast<uint64_t>(cfg.seq_len);
  LangData ld;
  ld.name = source.empty() ? lang : lang + "/" + source;
  ld.lang = lang;
  ld.source = source;
  ld.prob = weight;
  ld.key = hash_string(ld.name);  // "bn" for an older manifest: the same permutation as before
  ld.shards = set.readers(lang, "train", source);
  ld.cum.push_back(0);
  for (const auto& r : ld.shards) {
    const uint64_t n = r.size();
    uint64_t count = 0;
    if (cfg.doc_aligned) {
      std::vector<uint64_t> starts = doc_aligned_starts(r.doc_offsets(), n, T);
      count = starts.size();
      ld.starts.push_back(std::move(starts));
    } else {
      count = n >= T + 1 ? (n - 1) / T : 0;
    }
    ld.cum.push_back(ld.cum.back() + count);
  }
  if (ld.cum.back() == 0) return false;
  data->langs.push_back(std::move(ld));
  return true;
}

absl::StatusOr<BatchSampler> BatchSampler::create(const ShardSet& set, const SamplerConfig& cfg) {
  if (cfg.batch < 1) return absl::InvalidArgumentError(absl::StrFormat("sampler.batch: %d, expected >= 1", cfg.batch));
  if (cfg.seq_len < 1) return absl::InvalidArgumentError(absl::StrFormat("sampler.seq_len: %d, expected >= 1", cfg.seq_len));
  if (cfg.world < 1 || cfg.rank < 0 || cfg.rank >= cfg.world) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampler: rank %d of world %d (expected 0 <= rank < world)", cfg.rank, cfg.world));
  }
  const std::vector<std::string> train = set.languages("train");
  if (train.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(set.dir(), ": no training shards (re-run 'lmtrain prepare')"));
  }
  for (const auto& [lang, w] : cfg.weights) {
    if (!std::count(train.begin(), train.end(), lang) && w > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "weights.%s: language '%s' has no training shards in %s (have: %s)", lang, lang, set.dir(),
          absl::StrJoin(train, ", ")));
    }
    if (!(w >= 0) || !std::isfinite(w)) {
      return absl::InvalidArgumentError(absl::StrFormat("weights.%s: %g, expected a finite number >= 0", lang, w));
    }
  }
  auto data = std::make_shared<Data>();
  for (const auto& lang : train) {
    LM_ASSIGN_OR_RETURN(const auto weights, stream_weights(set, cfg, lang));
    std::vector<std::string> too_small;
    int added = 0;
    for (const auto& [source, w] : weights) {
      if (!(w > 0)) continue;
      LM_ASSIGN_OR_RETURN(const bool ok, add_stream(set, cfg, lang, source, w, data.get()));
      if (ok) {
        ++added;
      } else {
        too_small.push_back(source);
      }
    }
    if (added == 0 && !too_small.empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: language '%s' has %d training tokens, not one window of seq_len+1 = %d tokens in any source "
          "(lower seq_len, give it weight 0, or add text)",
          set.dir(), lang, set.tokens(lang, "train"), cfg.seq_len + 1));
    }
    for (const auto& src : too_small) {
      log_warn("sampler: source '%s' of '%s' has no window of seq_len+1 = %d tokens in %s; it adds no weight",
               src, lang, cfg.seq_len + 1, set.dir());
    }
  }
  double total = 0;
  for (const auto& ld : data->langs) total += ld.prob;
  if (data->langs.empty() || !(total > 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "weights: every training language has weight 0 (have: %s)", absl::StrJoin(train, ", ")));
  }
  double acc = 0;
  for (auto& ld : data->langs) {
    ld.prob /= total;
    acc += ld.prob;
    data->cdf.push_back(acc);
  }
  data->cdf.back() = 1.0;

  BatchSampler s;
  s.cfg_ = cfg;
  s.data_ = std::move(data);
  s.consumed_.assign(s.data_->langs.size(), 0);
  return s;
}

int BatchSampler::pick_language(uint64_t row) const {
  const auto& cdf = data_->cdf;
  if (cdf.size() == 1) return 0;
  const double u = static_cast<double>(mix64(cfg_.seed ^ mix64(row)) >> 11) * 0x1.0p-53;
  return static_cast<int>(std::upper_bound(cdf.begin(), cdf.end() - 1, u) - cdf.begin());
}

BatchSampler::Location BatchSampler::locate(int lang, uint64_t consumed) const {
  const LangData& ld = data_->langs[lang];
  const uint64_t n = ld.cum.back();
  const uint64_t epoch = consumed / n;
  const uint64_t key = mix64(cfg_.seed ^ ld.key) ^ mix64(epoch + 0x5851f42d4c957f2dULL);
  const uint64_t p = permute_index(consumed % n, n, key);
  const int s = static_cast<int>(std::upper_bound(ld.cum.begin(), ld.cum.end(), p) - ld.cum.begin()) - 1;
  const uint64_t k = p - ld.cum[s];
  Location loc;
  loc.lang = lang;
  loc.shard = s;
  loc.offset = cfg_.doc_aligned ? ld.starts[s][k] : k * static_cast<uint64_t>(cfg_.seq_len);
  return loc;
}

void BatchSampler::plan(int64_t step, std::vector<uint64_t>* consumed, std::vector<Location>* rows) const {
  const uint64_t per_step = static_cast<uint64_t>(cfg_.batch) * cfg_.world;
  const uint64_t base = static_cast<uint64_t>(step) * per_step;
  rows->clear();
  for (uint64_t j = 0; j < per_step; ++j) {
    const int l = pick_language(base + j);
    const uint64_t c = (*consumed)[l]++;
    if (static_cast<int64_t>(j) / cfg_.batch == cfg_.rank) rows->push_back(locate(l, c));
  }
}

void BatchSampler::next(std::vector<int32_t>* out) {
  const uint64_t row_len = static_cast<uint64_t>(cfg_.seq_len) + 1;
  std::vector<Location> rows;
  plan(step_, &consumed_, &rows);
  ++step_;
  out->resize(rows.size() * row_len);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Location& loc = rows[i];
    data_->langs[loc.lang].shards[loc.shard].copy(loc.offset, row_len, out->data() + i * row_len);
  }
  // Ask the kernel to page in the next step's windows now, so a cold mmap does not stall the
  // trainer; no thread, so the cursor is always exactly the next batch.
  std::vector<uint64_t> ahead = consumed_;
  plan(step_, &ahead, &rows);
  for (const Location& loc : rows) data_->langs[loc.lang].shards[loc.shard].prefetch(loc.offset, row_len);
}

std::vector<std::string> BatchSampler::languages() const {
  std::vector<std::string> out;
  for (const auto& ld : data_->langs) {
    if (std::find(out.begin(), out.end(), ld.lang) == out.end()) out.push_back(ld.lang);
  }
  std::sort(out.begin(), out.end());
  return out;
}

double BatchSampler::probability(const std::string& lang) const {
  double p = 0;
  for (const auto& ld : data_->langs) p += ld.lang == lang ? ld.prob : 0.0;
  return p;
}

uint64_t BatchSampler::windows(const std::string& lang) const {
  uint64_t n = 0;
  for (const auto& ld : data_->langs) n += ld.lang == lang ? ld.cum.back() : 0;
  return n;
}

double BatchSampler::epochs(const std::string& lang) const {
  uint64_t used = 0;
  for (size_t l = 0; l < data_->langs.size(); ++l) used += data_->langs[l].lang == lang ? consumed_[l] : 0;
  const uint64_t n = windows(lang);
  return n > 0 ? static_cast<double>(used) / static_cast<double>(n) : 0.0;
}

std::vector<BatchSampler::Stream> BatchSampler::streams() const {
  std::vector<Stream> out;
  for (const auto& ld : data_->langs) out.push_back({ld.name, ld.lang, ld.source, ld.prob, ld.cum.back()});
  return out;
}

Json BatchSampler::cursor() const {
  Json probs = Json::object(), wins = Json::object(), used = Json::object();
  for (size_t l = 0; l < data_->langs.size(); ++l) {
    const LangData& ld = data_->langs[l];
    probs[ld.name] = ld.prob;
    wins[ld.name] = ld.cum.back();
    used[ld.name] = consumed_[l];
  }
  return Json{{"kind", kCursorKind}, {"version", kCursorVersion}, {"seed", cfg_.seed},
              {"batch", cfg_.batch}, {"seq_len", cfg_.seq_len},   {"world", cfg_.world},
              {"doc_aligned", cfg_.doc_aligned}, {"probabilities", probs}, {"windows", wins},
              {"step", step_},     {"consumed", used}};
}

// The cursor's step in this sampler's layout: the global rows consumed (step x batch x world, the
// same whatever the layout: row g's window depends on g alone) over this one's rows per step. A
// resume on another number of ranks (trainer: the same rows per optimizer step) lands on a step
// boundary; a layout that would split one is refused.
absl::StatusOr<int64_t> BatchSampler::resharded_step(const Json& c) const {
  const int64_t batch = c.at("batch").get<int64_t>(), world = c.at("world").get<int64_t>();
  const int64_t rows = c.at("step").get<int64_t>() * batch * world, per_step = cfg_.batch * cfg_.world;
  if (batch < 1 || world < 1 || rows % per_step != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "data cursor: %d rows consumed (step %d x batch %d x world %d) are not a whole number of this run's steps of "
        "%d rows (batch %d x world %d); resume with a layout whose rows per step divide them",
        rows, c.at("step").get<int64_t>(), batch, world, per_step, cfg_.batch, cfg_.world));
  return rows / per_step;
}

absl::Status BatchSampler::restore(const Json& c) {
  auto bad = [](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat("data cursor: ", msg));
  };
  if (!c.is_object() || c.value("kind", "") != kCursorKind) {
    return bad("not a batch sampler cursor (expected an object with kind '" + std::string(kCursorKind) + "')");
  }
  if (c.value("version", 0) != kCursorVersion) {
    return bad(absl::StrFormat("version %s, this build reads %d", c.value("version", Json()).dump(), kCursorVersion));
  }
  try {
    auto same = [&](const char* key, const Json& mine) -> absl::Status {
      if (!c.contains(key) || c.at(key) != mine) {
        return bad(absl::StrFormat("%s: saved %s, this run has %s (resume with the same data settings, or "
                                   "start the data stream afresh)",
                                   key, c.contains(key) ? c.at(key).dump() : "nothing", mine.dump()));
      }
      return absl::OkStatus();
    };
    const Json mine = cursor();
    for (const char* key : {"seed", "seq_len", "doc_aligned", "windows"}) {
      LM_RETURN_IF_ERROR(same(key, mine.at(key)));
    }
    // Probabilities round-trip through JSON text; compare with a tolerance far below any real change.
    const Json& probs = c.at("probabilities");
    bool probs_ok = probs.is_object() && probs.size() == mine.at("probabilities").size();
    for (const auto& ld : data_->langs) {
      probs_ok = probs_ok && probs.contains(ld.name) && probs.at(ld.name).is_number() &&
                 std::abs(probs.at(ld.name).get<double>() - ld.prob) <= 1e-12;
    }
    if (!probs_ok) {
      return bad(absl::StrFormat("probabilities: saved %s, this run has %s (the mixture weights changed)",
                                 probs.dump(), mine.at("probabilities").dump()));
    }
    const Json& used = c.at("consumed");
    std::vector<uint64_t> consumed(data_->langs.size());
    for (size_t l = 0; l < data_->langs.size(); ++l) {
      const Json& v = used.at(data_->langs[l].name);
      if (!v.is_number_unsigned()) return bad("consumed." + data_->langs[l].name + ": expected a count");
      consumed[l] = v.get<uint64_t>();
    }
    if (!c.at("step").is_number_integer() || c.at("step").get<int64_t>() < 0) return bad("step: expected a count");
    LM_ASSIGN_OR_RETURN(step_, resharded_step(c));
    consumed_ = std::move(consumed);
  } catch (const Json::exception& e) {
    return bad(absl::StrCat("malformed: ", e.what()));
  }
  return absl::OkStatus();
}

std::vector<Passes> compute_passes(const std::vector<MixturePart>& parts, double tokens) {
  auto passes = [](double drawn, uint64_t have) {
    return have > 0 ? drawn / static_cast<double>(have) : (drawn > 0 ? HUGE_VAL : 0.0);
  };
  std::vector<Passes> langs, sources;
  for (const MixturePart& p : parts) {
    auto it = std::find_if(langs.begin(), langs.end(), [&](const Passes& r) { return r.lang == p.lang; });
    if (it == langs.end()) it = langs.insert(langs.end(), Passes{p.lang, "", 0, 0, 0, 0});
    it->share += p.share;
    it->tokens += p.tokens;
    if (!p.source.empty()) {
      const double drawn = tokens * p.share;
      sources.push_back({p.lang, p.source, p.share, p.tokens, drawn, passes(drawn, p.tokens)});
    }
  }
  for (Passes& r : langs) {
    r.drawn = tokens * r.share;
    r.passes = passes(r.drawn, r.tokens);
  }
  langs.insert(langs.end(), sources.begin(), sources.end());
  return langs;
}

std::string format_passes(const std::vector<Passes>& rows, double tokens, const std::string& what) {
  std::string s = absl::StrFormat("passes over the data for %s tokens (%s):\n", format_count(tokens), what);
  s += absl::StrFormat("  %-32s %7s %12s %12s %8s\n", "lang / source", "share", "tokens", "drawn", "passes");
  for (const Passes& r : rows) {
    const std::string name = r.source.empty() ? r.lang : "  " + r.lang + "/" + r.source;
    s += absl::StrFormat("  %-32s %6.1f%% %12s %12s %7.2fx%s\n", name, 100 * r.share,
                         format_count(static_cast<double>(r.tokens)), format_count(r.drawn), r.passes,
                         r.passes > kMaxFreshPasses ? "  > 4: repeats" : "");
  }
  return s;
}

int warn_passes(const std::vector<Passes>& rows, double tokens, const std::string& what) {
  std::vector<std::string> parts;
  for (const Passes& r : rows) {
    if (!(r.passes > kMaxFreshPasses)) continue;
    // A language's only source repeats its language's line.
    const bool alone = !r.source.empty() && std::any_of(rows.begin(), rows.end(), [&](const Passes& l) {
      return l.source.empty() && l.lang == r.lang && l.tokens == r.tokens;
    });
    if (alone) continue;
    parts.push_back(absl::StrFormat("%s '%s' %.1f passes over %s tokens", r.source.empty() ? "language" : "source",
                                    r.source.empty() ? r.lang : r.lang + "/" + r.source, r.passes,
                                    format_count(static_cast<double>(r.tokens))));
  }
  if (parts.empty()) return 0;
  log_warn("%s: %s tokens repeat the same text more than %g times: %s (past ~%g passes repeated tokens are worth "
           "much less than fresh ones, Muennighoff et al. 2023: add text, lower the weight or train on fewer tokens)",
           what, format_count(tokens), kMaxFreshPasses, absl::StrJoin(parts, "; "), kMaxFreshPasses);
  return static_cast<int>(parts.size());
}

std::vector<MixturePart> mixture_parts(const BatchSampler& sampler) {
  std::vector<MixturePart> parts;
  const uint64_t T = static_cast<uint64_t>(sampler.config().seq_len);
  for (const auto& st : sampler.streams()) parts.push_back({st.lang, st.source, st.probability, st.windows * T});
  return parts;
}

Json passes_to_json(const std::vector<Passes>& rows, double tokens) {
  Json out = Json::array();
  for (const Passes& r : rows) {
    out.push_back(Json{{"lang", r.lang},
                       {"source", r.source},
                       {"share", r.share},
                       {"tokens", r.tokens},
                       {"drawn", r.drawn},
                       {"passes", std::isfinite(r.passes) ? Json(r.passes) : Json(nullptr)}});
  }
  return Json{{"tokens", tokens}, {"max_fresh_passes", kMaxFreshPasses}, {"rows", out}};
}

absl::StatusOr<std::vector<std::vector<int32_t>>> validation_windows(const ShardSet& set,
                                                                     const std::string& lang,
                                                                     int64_t seq_len,
                                                                     int64_t max_windows,
                                                                     int64_t stride) {
  if (seq_len < 1) return absl::InvalidArgumentError(absl::StrFormat("seq_len: %d, expected >= 1", seq_len));
  if (stride < 0) return absl::InvalidArgumentError(absl::StrFormat("stride: %d, expected >= 0", stride));
  if (stride == 0) stride = seq_len;
  const std::vector<ShardReader> shards = set.readers(lang, "val");
  if (shards.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "%s: no validation shards for language '%s' (have val: %s; re-run 'lmtrain prepare' with a "
        "larger --val-fraction)",
        set.dir(), lang, absl::StrJoin(set.languages("val"), ", ")));
  }
  const uint64_t len = static_cast<uint64_t>(seq_len) + 1;
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : shards) {
    for (uint64_t p = 0; p + len <= r.size(); p += static_cast<uint64_t>(stride)) {
      if (max_windows > 0 && static_cast<int64_t>(out.size()) >= max_windows) return out;
      std::vector<int32_t> w(len);
      r.copy(p, len, w.data());
      out.push_back(std::move(w));
    }
  }
  if (out.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: validation split of '%s' has %d tokens, fewer than seq_len+1 = %d (lower seq_len or "
        "re-run 'lmtrain prepare' with a larger --val-fraction)",
        set.dir(), lang, set.tokens(lang, "val"), len));
  }
  return out;
}

}  // namespace lm::data
