// The tokenizer's training sample: each source's share of the manifest weights, read on until it
// is met, and what happens when a source (or a whole language) has less text than its share.
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "tokenizer/train.h"

namespace lm::tokenizer {
namespace {

// One source: its documents counted first (held-out ones excluded), then the chosen ones read.
struct SourceDocs {
  std::vector<int64_t> doc_chars;  // code points (line breaks not counted) of each counted document
  std::vector<std::string> docs;   // the chosen documents' text (read_chosen)
  int64_t chars = 0;               // sum of doc_chars
  int64_t seen = 0;                // documents the reader delivered, held-out ones included
  bool exhausted = false;          // the reader reached the end of the source
  data::ReadStats stats;           // of the latest count, which covers the earlier ones
};

// Where the rest of a short source's share comes from (TrainOptions::fill).
enum class Fill { kSameLanguage, kOtherLanguages, kNone };

absl::StatusOr<Fill> parse_fill(const TrainOptions& o) {
  if (o.keep_ratio) return Fill::kNone;  // the legacy key of older tokenizer.json files and configs
  if (o.fill == "same-language") return Fill::kSameLanguage;
  if (o.fill == "other-languages") return Fill::kOtherLanguages;
  if (o.fill == "none") return Fill::kNone;
  return absl::InvalidArgumentError(absl::StrCat("fill: expected same-language, other-languages or none, got '", o.fill,
                                                 "' (--fill)"));
}

// Takes whole lines of `docs` until `budget` code points are used (returned), so the ratio holds to
// about one line even when documents are long (a Wikipedia article, a novel's chapter); lines
// longer than `max_len` bytes are split. Counts go to `ls`, the lines to `out`.
int64_t take_lines(const std::vector<std::string>& docs, double budget, int32_t lang_index, size_t max_len,
                   LangSample& ls, TrainingSample& out) {
  int64_t used = 0;
  for (const auto& doc : docs) {
    if (used >= budget) break;
    ++ls.documents;
    size_t start = 0;
    while (start <= doc.size() && used < budget) {
      size_t nl = doc.find('\n', start);
      if (nl == std::string::npos) nl = doc.size();
      std::string_view line(doc.data() + start, nl - start);
      if (!line.empty() && line.find_first_not_of(" \t\r") != std::string_view::npos) {
        if (line.size() > max_len) ++out.summary.long_lines_split;
        split_long_line(line, max_len, &out.sentences);
        out.sentence_lang.resize(out.sentences.size(), lang_index);
        const int64_t c = data::count_code_points(line);
        used += c;
        ls.chars += c;
        ls.bytes += static_cast<int64_t>(line.size());
      }
      start = nl + 1;
    }
  }
  return used;
}

bool is_heldout(const TrainOptions& o, int64_t index) {
  return o.heldout_every > 0 && index % o.heldout_every == o.heldout_every - 1;
}

// Counts the documents of sources[i] on until `limit` code points are counted (or the source ends);
// held-out documents go to `out`. A later call re-opens the source and skips the documents it
// already delivered: the reader is deterministic, so the same documents come in the same order and
// dedup sees them again.
absl::Status count_until(const data::CorpusManifest& m, size_t i, const TrainOptions& o, double limit,
                         SourceDocs& sd, TrainingSample& out) {
  std::vector<std::string>& held = out.heldout[m.sources[i].lang];
  std::vector<std::string>& held_here = out.heldout_by_source[data::source_id(m, i)];
  if (sd.exhausted || sd.chars >= limit) return absl::OkStatus();
  data::ReadOptions ro;
  ro.dedup = o.dedup;
  ro.skip_invalid_utf8 = o.skip_invalid_utf8;
  int64_t k = 0;
  bool stopped = false;
  data::ReadStats st;
  LM_RETURN_IF_ERROR(data::for_each_document(m, m.sources[i], ro, [&](const std::string& doc) {
    if (k++ < sd.seen) return absl::OkStatus();
    if (is_heldout(o, sd.seen++)) {
      held.push_back(doc);
      held_here.push_back(doc);
      return absl::OkStatus();
    }
    // Without the line breaks, as take_lines counts: a short language's share is then exact.
    const int64_t c = data::count_code_points(doc) - static_cast<int64_t>(std::count(doc.begin(), doc.end(), '\n'));
    sd.doc_chars.push_back(c);
    sd.chars += c;
    if (sd.chars < limit) return absl::OkStatus();
    stopped = true;
    return data::stop_reading();
  }, &st));
  sd.exhausted = !stopped;
  sd.stats = st;  // this count covers the earlier ones
  return absl::OkStatus();
}

// Which counted documents make up `target` code points, spread evenly over all of them (systematic
// sampling: every (1/r)-th document, r raised until the chosen ones hold the target), so a source
// with more text than its share gives a sample of its whole length, not of its first documents.
std::vector<char> choose_spread(const std::vector<int64_t>& doc_chars, int64_t total, double target) {
  std::vector<char> keep(doc_chars.size(), 1);
  if (target >= static_cast<double>(total)) return keep;
  for (double r = target / static_cast<double>(total);; r = std::min(1.0, r * 1.02)) {
    double kept = 0;
    for (size_t j = 0; j < doc_chars.size(); ++j) {
      keep[j] = std::floor(static_cast<double>(j + 1) * r) > std::floor(static_cast<double>(j) * r);
      if (keep[j]) kept += static_cast<double>(doc_chars[j]);
    }
    if (kept >= target || r >= 1.0) return keep;
  }
}

// Reads the text of the documents choose_spread picked for `target` code points into sd.docs
// (sample_spread 1: every counted document, take_lines then takes the first ones, as before issue 31).
absl::Status read_chosen(const data::CorpusManifest& m, size_t i, const TrainOptions& o, double target,
                         SourceDocs& sd) {
  const std::vector<char> keep = o.sample_spread == 1 ? std::vector<char>(sd.doc_chars.size(), 1)
                                                      : choose_spread(sd.doc_chars, sd.chars, target);
  const auto last = std::find(keep.rbegin(), keep.rend(), 1);
  if (last == keep.rend()) return absl::OkStatus();
  const int64_t end = keep.rend() - last;  // one past the last chosen document
  data::ReadOptions ro;
  ro.dedup = o.dedup;
  ro.skip_invalid_utf8 = o.skip_invalid_utf8;
  int64_t index = 0, j = 0;
  data::ReadStats st;
  return data::for_each_document(m, m.sources[i], ro, [&](const std::string& doc) {
    if (is_heldout(o, index++)) return absl::OkStatus();
    if (keep[j]) sd.docs.push_back(doc);
    return ++j < end ? absl::OkStatus() : data::stop_reading();
  }, &st);
}

// Water-filling over the sources in `group`: targets t_i = min(a_i, lambda * w_i) with
// sum t_i = total, where a_i is known only for exhausted sources (the others may still give more),
// so a short source gives all it has and the others of the group share its shortfall by weight.
void fill_targets(const std::vector<double>& w, const std::vector<SourceDocs>& sd, const std::vector<size_t>& group,
                  double total, std::vector<double>& t) {
  std::map<size_t, bool> capped;
  double lambda = 0;
  for (bool changed = true; changed;) {
    double rest = total, wsum = 0;
    for (size_t i : group) capped[i] ? rest -= static_cast<double>(sd[i].chars) : wsum += w[i];
    if (wsum <= 0) break;
    lambda = std::max(rest, 0.0) / wsum;
    changed = false;
    for (size_t i : group) {
      if (!capped[i] && sd[i].exhausted && static_cast<double>(sd[i].chars) < lambda * w[i]) capped[i] = changed = true;
    }
  }
  for (size_t i : group) t[i] = capped[i] ? static_cast<double>(sd[i].chars) : lambda * w[i];
}

// The groups whose total share is kept: one per language, or (fill "other-languages") all sources.
struct Groups {
  std::vector<std::vector<size_t>> members;
  std::vector<double> total;  // characters asked of each group
};

Groups make_groups(const data::CorpusManifest& m, const TrainOptions& o, Fill fill) {
  Groups g;
  std::map<std::string, size_t> index;
  double total_w = 0;
  for (const auto& s : m.sources) total_w += s.weight;
  for (size_t i = 0; i < m.sources.size(); ++i) {
    const std::string key = fill == Fill::kOtherLanguages ? "" : m.sources[i].lang;
    if (!index.count(key)) {
      index[key] = g.members.size();
      g.members.emplace_back();
      g.total.push_back(0);
    }
    g.members[index[key]].push_back(i);
    g.total[index[key]] += static_cast<double>(o.sample_chars) * m.sources[i].weight / total_w;
  }
  return g;
}

// How far a source is counted for a share of `target` code points: sample_spread times it (0: to
// its end), so the chosen documents spread over that much of it.
double count_limit(const TrainOptions& o, double target) {
  return o.sample_spread > 0 ? target * static_cast<double>(o.sample_spread) : HUGE_VAL;
}

// Counts every source far enough for its share of the sample and returns the per-source
// character budgets.
absl::StatusOr<std::vector<double>> count_sources(const data::CorpusManifest& m, const TrainOptions& o, Fill fill,
                                                 std::vector<SourceDocs>& sd, TrainingSample& out) {
  const size_t n = m.sources.size();
  std::vector<double> w(n), t(n);
  Groups g = make_groups(m, o, fill);
  double total_w = 0;
  for (size_t i = 0; i < n; ++i) total_w += w[i] = m.sources[i].weight;
  for (size_t i = 0; i < n; ++i) {  // first every source to its own quota
    t[i] = static_cast<double>(o.sample_chars) * w[i] / total_w;
    LM_RETURN_IF_ERROR(count_until(m, i, o, count_limit(o, t[i]), sd[i], out));
  }
  if (fill == Fill::kNone) {  // the exact source mix: every source cut by the worst shortfall
    double f = 1.0;
    for (size_t i = 0; i < n; ++i) f = std::min(f, static_cast<double>(sd[i].chars) / t[i]);
    for (auto& q : t) q *= f;
    return t;
  }
  for (bool more = true; more;) {  // each round meets every target or finds another source exhausted
    more = false;
    for (size_t k = 0; k < g.members.size(); ++k) fill_targets(w, sd, g.members[k], g.total[k], t);
    for (size_t i = 0; i < n; ++i) {
      if (sd[i].exhausted || static_cast<double>(sd[i].chars) >= count_limit(o, t[i])) continue;
      more = true;
      LM_RETURN_IF_ERROR(count_until(m, i, o, count_limit(o, t[i]), sd[i], out));
    }
  }
  // A group that holds less than its share (all its sources read to the end) cuts every group by
  // the same factor, so the asked language mix holds in a smaller sample.
  double f = 1.0;
  for (size_t k = 0; k < g.members.size(); ++k) {
    double have = 0;
    for (size_t i : g.members[k]) have += static_cast<double>(sd[i].chars);
    f = std::min(f, have / g.total[k]);
  }
  if (f < 1.0) {
    for (size_t k = 0; k < g.members.size(); ++k) fill_targets(w, sd, g.members[k], g.total[k] * f, t);
  }
  return t;
}

// Counts the sources, sets their budgets, then reads each one's chosen documents (spread over
// what was counted); returns the budgets.
absl::StatusOr<std::vector<double>> read_sources(const data::CorpusManifest& m, const TrainOptions& o, Fill fill,
                                                 std::vector<SourceDocs>& sd, TrainingSample& out) {
  LM_ASSIGN_OR_RETURN(std::vector<double> t, count_sources(m, o, fill, sd, out));
  for (size_t i = 0; i < t.size(); ++i) LM_RETURN_IF_ERROR(read_chosen(m, i, o, t[i], sd[i]));
  return t;
}

std::string pct(int64_t part, int64_t total) {
  return absl::StrFormat("%.1f%%", total > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(total) : 0.0);
}

// What each language got and asked: "bn 64.4% (asked 64.4%, 10.4M, all it has)".
std::string describe_languages(const TrainingSample& out) {
  std::vector<std::string> parts;
  for (const LangSample& l : out.summary.languages) {
    // All it has: every source of the language counted to its end and taken whole (a source is
    // counted beyond its budget to spread its sample, so "counted to its end" alone is not enough).
    const bool all = std::all_of(out.sources.begin(), out.sources.end(), [&](const SourceSample& s) {
      return s.lang != l.lang || (s.exhausted && static_cast<double>(s.chars) >= 0.99 * static_cast<double>(s.read_chars));
    });
    parts.push_back(absl::StrFormat("%s %.1f%% (asked %.1f%%, %s%s)", l.lang, 100 * l.char_share, 100 * l.weight_share,
                                    format_count(static_cast<double>(l.chars)), all ? ", all it has" : ""));
  }
  return absl::StrJoin(parts, ", ");
}

// A short source is never silent: one line names it with its size, its asked share, what it gave
// and where the rest came from; a sample smaller than asked is one line with each language's share.
void warn_shortfalls(const TrainingSample& out, const TrainOptions& o, Fill fill, int64_t total_chars) {
  const double sample = static_cast<double>(o.sample_chars);
  const bool shrank = static_cast<double>(total_chars) < 0.99 * sample;
  for (const SourceSample& s : out.sources) {
    if (!s.exhausted || s.read_chars >= s.asked_chars || (shrank && fill != Fill::kNone)) continue;
    log_warn("tokenizer sample: source %s has %s characters, less than its share %.1f%% of the %s-character "
             "sample (%s); it gave %s (%s of the sample)%s",
             s.description, format_count(static_cast<double>(s.read_chars)), 100 * s.weight_share,
             format_count(sample), format_count(static_cast<double>(s.asked_chars)),
             format_count(static_cast<double>(s.chars)), pct(s.chars, total_chars),
             fill == Fill::kNone            ? "; fill none cuts every other source by the same factor"
             : fill == Fill::kSameLanguage ? absl::StrCat("; the other '", s.lang,
                                                          "' sources filled the rest, the language mix is as asked")
                                           : "; the other sources (any language) filled the rest by weight");
  }
  if (!shrank) return;
  // Sources are counted beyond their share (sample_spread), so "all read" alone does not mean the
  // corpus is smaller than the sample: it must also hold fewer characters than asked.
  int64_t corpus_chars = 0;
  for (const SourceSample& s : out.sources) corpus_chars += s.read_chars;
  const bool all_read =
      std::all_of(out.sources.begin(), out.sources.end(), [](const SourceSample& s) { return s.exhausted; }) &&
      static_cast<double>(corpus_chars) < sample;
  log_warn("tokenizer sample: %s characters instead of the %s asked (sample_chars): %s; %s",
           format_count(static_cast<double>(total_chars)), format_count(sample),
           fill == Fill::kOtherLanguages ? "the whole corpus is smaller, every source was used to its end"
           : fill == Fill::kNone         ? "fill none cut every source by the same factor (the exact source mix)"
           : all_read ? "the whole corpus is smaller, so the language with the least text for its share set the size "
                        "and the others were cut to keep the asked language mix"
                      : "a language has less text than its share, so every language was cut by "
                        "the same factor to keep the asked language mix",
           describe_languages(out) + " (add text, lower --sample-chars, or --fill other-languages to "
                                                  "keep the size by filling from other languages)");
}

}  // namespace

absl::StatusOr<TrainingSample> build_sample(const data::CorpusManifest& m, const TrainOptions& o) {
  if (o.sample_chars <= 0) return absl::InvalidArgumentError("sample_chars: must be positive");
  if (o.sample_spread < 0)
    return absl::InvalidArgumentError("sample_spread: must be 0 (whole sources) or at least 1 (--sample-spread)");
  if (o.max_sentence_length < 256) return absl::InvalidArgumentError("max_sentence_length: must be at least 256 bytes");
  double total_w = 0;
  for (const auto& s : m.sources) total_w += s.weight;
  TrainingSample out;
  std::vector<SourceDocs> per_source(m.sources.size());
  LM_ASSIGN_OR_RETURN(const Fill fill, parse_fill(o));
  LM_ASSIGN_OR_RETURN(const std::vector<double> budget, read_sources(m, o, fill, per_source, out));
  std::map<std::string, LangSample> langs;
  std::map<std::string, int32_t> lang_idx;
  data::ReadStats stats;
  int64_t total_chars = 0;
  for (size_t i = 0; i < m.sources.size(); ++i) {
    const auto& src = m.sources[i];
    if (!lang_idx.count(src.lang)) {
      lang_idx[src.lang] = static_cast<int32_t>(out.langs.size());
      out.langs.push_back(src.lang);
    }
    LangSample& ls = langs[src.lang];
    ls.lang = src.lang;
    ls.weight_share += src.weight / total_w;
    ls.available_chars += per_source[i].chars;
    const int64_t used = take_lines(per_source[i].docs, budget[i], lang_idx[src.lang],
                                    static_cast<size_t>(o.max_sentence_length), ls, out);
    total_chars += used;
    stats.add(per_source[i].stats);
    SourceSample ss{data::source_id(m, i), src.lang, data::describe_source(m, i), src.weight / total_w};
    ss.asked_chars = static_cast<int64_t>(std::llround(static_cast<double>(o.sample_chars) * ss.weight_share));
    ss.read_chars = per_source[i].chars;
    ss.chars = used;
    ss.exhausted = per_source[i].exhausted;
    out.sources.push_back(ss);
  }
  for (const auto& l : out.langs) {
    LangSample ls = langs[l];
    ls.char_share = total_chars > 0 ? static_cast<double>(ls.chars) / total_chars : 0;
    out.summary.languages.push_back(ls);
  }
  out.summary.sentences = static_cast<int64_t>(out.sentences.size());
  out.summary.invalid_utf8_skipped = stats.invalid_skipped;
  out.summary.empty_dropped = stats.empty_dropped;
  out.summary.duplicates_dropped = stats.duplicates_dropped;
  if (out.sentences.empty()) return absl::InvalidArgumentError("the corpus has no text to train on");
  warn_shortfalls(out, o, fill, total_chars);
  return out;
}


}  // namespace lm::tokenizer
