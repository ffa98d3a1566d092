#include "tokenizer/train.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "tokenizer/normalize.h"

namespace lm::tokenizer {
namespace {

// UTF-8 decode of one code point at s[i] (valid input); advances i.
uint32_t next_cp(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_cont(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

absl::Status make_dir(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return absl::PermissionDeniedError(absl::StrCat(cur, ": cannot create folder (", strerror(errno), ")"));
    }
    if (i < dir.size()) cur += dir[i];
  }
  return absl::OkStatus();
}

// The documents of one source read so far (held-out ones excluded).
struct SourceDocs {
  std::vector<std::string> docs;
  int64_t chars = 0;
  int64_t seen = 0;        // documents the reader delivered, held-out ones included
  bool exhausted = false;  // the reader reached the end of the source
  data::ReadStats stats;   // of the latest read, which covers the earlier ones
};

// ---- Portable identity: spm.model without the facts of where and how fast it was trained ----
// SentencePiece records the rule file's path (NormalizerSpec.normalization_rule_tsv, our --out
// folder) and the trainer's thread count (TrainerSpec.num_threads) in the model, so the same
// tokenizer trained into `tok8k/` and `tok8k` had other bytes and so another hash (the thread
// count is dropped too; whether training itself is thread-independent is SentencePiece's matter). Those fields are informational when loading (the rules are compiled into
// precompiled_charsmap), so they are dropped from the serialized ModelProto (protobuf wire format,
// https://protobuf.dev/programming-guides/encoding/; field numbers from sentencepiece_model.proto).
constexpr int kTrainerSpec = 2, kNormalizerSpec = 3, kDenormalizerSpec = 5;
constexpr int kTrainerInput = 1, kTrainerModelPrefix = 2, kTrainerNumThreads = 16, kNormalizerRuleTsv = 6;

bool read_varint(const std::string& b, size_t& i, uint64_t* v) {
  *v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[i++]);
    *v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

void write_varint(uint64_t v, std::string* out) {
  do {
    uint8_t c = v & 0x7f;
    v >>= 7;
    out->push_back(static_cast<char>(v ? c | 0x80 : c));
  } while (v);
}

// Copies the message `b` without the fields in `drop`; `edit(field, bytes)` may rewrite a
// length-delimited field. False when `b` is not well-formed.
template <class Edit>
bool filter_message(const std::string& b, const std::set<int>& drop, Edit edit, std::string* out) {
  for (size_t i = 0; i < b.size();) {
    const size_t start = i;
    uint64_t tag = 0, v = 0;
    if (!read_varint(b, i, &tag)) return false;
    const int field = static_cast<int>(tag >> 3), wire = static_cast<int>(tag & 7);
    std::string payload;
    if (wire == 0) {
      if (!read_varint(b, i, &v)) return false;
    } else if (wire == 1 || wire == 5) {
      i += wire == 1 ? 8 : 4;
    } else if (wire == 2) {
      if (!read_varint(b, i, &v) || v > b.size() - i) return false;
      payload = b.substr(i, v);
      i += v;
    } else {
      return false;  // groups: not in sentencepiece_model.proto
    }
    if (i > b.size()) return false;
    if (drop.count(field)) continue;
    if (wire == 2 && edit(field, &payload)) {
      write_varint(tag, out);
      write_varint(payload.size(), out);
      out->append(payload);
    } else {
      out->append(b, start, i - start);
    }
  }
  return true;
}

}  // namespace

std::string portable_model_bytes(const std::string& model) {
  auto inner = [](int field, std::string* payload) {
    std::set<int> drop;
    if (field == kTrainerSpec) drop = {kTrainerInput, kTrainerModelPrefix, kTrainerNumThreads};
    if (field == kNormalizerSpec || field == kDenormalizerSpec) drop = {kNormalizerRuleTsv};
    if (drop.empty()) return false;
    std::string out;
    if (!filter_message(*payload, drop, [](int, std::string*) { return false; }, &out)) return false;
    *payload = std::move(out);
    return true;
  };
  std::string out;
  return filter_message(model, {}, inner, &out) ? out : model;
}

int split_long_line(std::string_view line, size_t max_bytes, std::vector<std::string>* out) {
  int pieces = 0;
  while (line.size() > max_bytes) {
    size_t cut = std::string::npos;
    const std::string_view window = line.substr(0, max_bytes);
    // Sentence end: danda, ? ! or '.' followed by a space; cut after the space.
    for (size_t i = window.size(); i-- > 1;) {
      if (window[i] != ' ') continue;
      const std::string_view before = window.substr(0, i);
      if (ends_with(before, "\xE0\xA5\xA4") || ends_with(before, "?") || ends_with(before, "!") ||
          ends_with(before, ".")) {
        cut = i + 1;
        break;
      }
    }
    if (cut == std::string::npos) {
      const size_t sp = window.rfind(' ');
      if (sp != std::string::npos && sp > 0) cut = sp + 1;
    }
    if (cut == std::string::npos) {
      cut = max_bytes;
      while (cut > 0 && is_cont(line[cut])) --cut;
      if (cut == 0) cut = max_bytes;
    }
    std::string_view piece = line.substr(0, cut);
    while (!piece.empty() && piece.back() == ' ') piece.remove_suffix(1);
    if (!piece.empty()) {
      out->emplace_back(piece);
      ++pieces;
    }
    line.remove_prefix(cut);
  }
  if (!line.empty()) {
    out->emplace_back(line);
    ++pieces;
  }
  return pieces;
}

namespace {

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

}  // namespace

namespace {

// Reads sources[i] on until `target` code points are taken (or the source ends). A later call
// re-opens the source and skips the documents it already delivered: the reader is deterministic,
// so the same documents come in the same order and dedup sees them again.
absl::Status read_until(const data::CorpusManifest& m, size_t i, const TrainOptions& o, double target,
                        SourceDocs& sd, std::vector<std::string>& held) {
  if (sd.exhausted || sd.chars >= target) return absl::OkStatus();
  data::ReadOptions ro;
  ro.dedup = o.dedup;
  ro.skip_invalid_utf8 = o.skip_invalid_utf8;
  int64_t k = 0;
  bool stopped = false;
  data::ReadStats st;
  LM_RETURN_IF_ERROR(data::for_each_document(m, m.sources[i], ro, [&](const std::string& doc) {
    if (k++ < sd.seen) return absl::OkStatus();
    const int64_t index = sd.seen++;
    if (o.heldout_every > 0 && index % o.heldout_every == o.heldout_every - 1) {
      held.push_back(doc);
      return absl::OkStatus();
    }
    sd.chars += data::count_code_points(doc);
    sd.docs.push_back(doc);
    if (sd.chars < target) return absl::OkStatus();
    stopped = true;
    return data::stop_reading();
  }, &st));
  sd.exhausted = !stopped;
  sd.stats = st;  // this read covers the earlier ones
  return absl::OkStatus();
}

// Water-filling: targets t_i = min(a_i, lambda * w_i) with sum t_i = total, where a_i is known
// only for exhausted sources (the others may still give more), so a short source gives all it
// has and the others share its shortfall in proportion to their weights.
std::vector<double> fill_targets(const std::vector<double>& w, const std::vector<SourceDocs>& sd, double total) {
  const size_t n = w.size();
  std::vector<bool> capped(n, false);
  double lambda = 0;
  for (bool changed = true; changed;) {
    double rest = total, wsum = 0;
    for (size_t i = 0; i < n; ++i) capped[i] ? rest -= static_cast<double>(sd[i].chars) : wsum += w[i];
    if (wsum <= 0) break;
    lambda = std::max(rest, 0.0) / wsum;
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (!capped[i] && sd[i].exhausted && static_cast<double>(sd[i].chars) < lambda * w[i]) capped[i] = changed = true;
    }
  }
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = capped[i] ? static_cast<double>(sd[i].chars) : lambda * w[i];
  return t;
}

// Reads every source to its share of the sample and returns the per-source character budgets.
absl::StatusOr<std::vector<double>> read_sources(const data::CorpusManifest& m, const TrainOptions& o,
                                                 std::vector<SourceDocs>& sd, TrainingSample& out) {
  const size_t n = m.sources.size();
  std::vector<double> w(n), quota(n);
  double total_w = 0;
  for (const auto& s : m.sources) total_w += s.weight;
  for (size_t i = 0; i < n; ++i) {
    w[i] = m.sources[i].weight;
    quota[i] = static_cast<double>(o.sample_chars) * w[i] / total_w;
    LM_RETURN_IF_ERROR(read_until(m, i, o, quota[i], sd[i], out.heldout[m.sources[i].lang]));
  }
  if (o.keep_ratio) {  // the exact mix: every source cut by the worst shortfall
    double f = 1.0;
    for (size_t i = 0; i < n; ++i) f = std::min(f, static_cast<double>(sd[i].chars) / quota[i]);
    for (auto& q : quota) q *= f;
    return quota;
  }
  while (true) {  // each round either meets every target or finds another source exhausted
    std::vector<double> t = fill_targets(w, sd, static_cast<double>(o.sample_chars));
    bool more = false;
    for (size_t i = 0; i < n; ++i) {
      if (sd[i].exhausted || static_cast<double>(sd[i].chars) >= t[i]) continue;
      more = true;
      LM_RETURN_IF_ERROR(read_until(m, i, o, t[i], sd[i], out.heldout[m.sources[i].lang]));
    }
    if (!more) return t;
  }
}

// A short source is never silent: it is named with its size, its asked share and what it gave.
// A corpus smaller than the sample (every source read to its end, as the demo's) is one warning
// with each source's share, not one per source.
void warn_shortfalls(const TrainingSample& out, const TrainOptions& o, int64_t total_chars) {
  const double sample = static_cast<double>(o.sample_chars);
  const bool all_read = !out.sources.empty() && static_cast<double>(total_chars) < 0.99 * sample &&
                        std::all_of(out.sources.begin(), out.sources.end(),
                                    [](const SourceSample& s) { return s.exhausted; });
  if (all_read && !o.keep_ratio) {
    std::vector<std::string> shares;
    for (const SourceSample& s : out.sources)
      shares.push_back(absl::StrFormat("'%s' %.1f%% (weights ask %.1f%%)", s.id,
                                       total_chars > 0 ? 100.0 * s.chars / total_chars : 0.0, 100 * s.weight_share));
    log_warn("tokenizer sample: %s characters instead of the %s asked (sample_chars): the whole corpus is smaller, "
             "so every source is used to its end and the mix is the corpus's own: %s (add text or lower "
             "--sample-chars to silence this)",
             format_count(total_chars), format_count(sample), absl::StrJoin(shares, ", "));
    return;
  }
  for (const SourceSample& s : out.sources) {
    if (!s.exhausted || s.read_chars >= s.asked_chars) continue;
    log_warn("tokenizer sample: source %s has %s characters, less than its share %.1f%% of the %s-character "
             "sample (%s); it gave %s (%.2f%% of the sample)%s",
             s.description, format_count(static_cast<double>(s.read_chars)), 100 * s.weight_share,
             format_count(sample), format_count(static_cast<double>(s.asked_chars)),
             format_count(static_cast<double>(s.chars)), total_chars > 0 ? 100.0 * s.chars / total_chars : 0.0,
             o.keep_ratio ? "; keep_ratio cuts every other source by the same factor"
                          : "; the other sources filled the rest in proportion to their weights");
  }
  if (static_cast<double>(total_chars) < 0.99 * sample) {
    log_warn("tokenizer sample: %s characters instead of the %s asked (sample_chars): %s", format_count(total_chars),
             format_count(sample),
             o.keep_ratio ? "keep_ratio cut every source to keep the weights' exact mix (--keep-ratio false "
                            "fills from the other sources instead)"
                          : "the corpus holds no more text (add text or lower --sample-chars)");
  }
}

}  // namespace

absl::StatusOr<TrainingSample> build_sample(const data::CorpusManifest& m, const TrainOptions& o) {
  if (o.sample_chars <= 0) return absl::InvalidArgumentError("sample_chars: must be positive");
  if (o.max_sentence_length < 256) return absl::InvalidArgumentError("max_sentence_length: must be at least 256 bytes");
  double total_w = 0;
  for (const auto& s : m.sources) total_w += s.weight;
  TrainingSample out;
  std::vector<SourceDocs> per_source(m.sources.size());
  LM_ASSIGN_OR_RETURN(const std::vector<double> budget, read_sources(m, o, per_source, out));
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
  warn_shortfalls(out, o, total_chars);
  return out;
}

std::unordered_map<std::string, std::string> spm_kwargs(const TrainOptions& o, const std::string& required_chars,
                                                        const std::string& rule_tsv_path) {
  const int threads = o.threads > 0 ? static_cast<int>(o.threads)
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unordered_map<std::string, std::string> kw = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", absl::StrFormat("%.6g", o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"split_digits", o.split_digits ? "true" : "false"},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"max_sentencepiece_length", std::to_string(o.max_piece_length)},
      {"seed_sentencepiece_size", std::to_string(o.seed_sentencepiece_size)},
      {"shrinking_factor", absl::StrFormat("%.6g", o.shrinking_factor)},
      {"num_sub_iterations", std::to_string(o.num_sub_iterations)},
      {"num_threads", std::to_string(threads)},
      {"normalization_rule_tsv", rule_tsv_path},
      // Exact round trip: keep every space as it is (the default collapses runs and trims).
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"pad_id", std::to_string(kPadId)},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"train_extremely_large_corpus", "false"},
  };
  if (!required_chars.empty()) kw["required_chars"] = required_chars;
  return kw;
}

namespace {

// "the sample has 110k characters in 2.3k sentences: 'news' 60k (bn), 'small' 50k (bn, all it has)".
std::string describe_sample(const TrainingSample& sample) {
  int64_t chars = 0;
  for (const auto& l : sample.summary.languages) chars += l.chars;
  std::string s = absl::StrFormat("the sample has %s characters in %s sentences",
                                  format_count(static_cast<double>(chars)),
                                  format_count(static_cast<double>(sample.sentences.size())));
  for (size_t i = 0; i < sample.sources.size(); ++i) {
    const SourceSample& src = sample.sources[i];
    absl::StrAppend(&s, i ? ", " : ": ", "'", src.id, "' ", format_count(static_cast<double>(src.chars)), " (",
                    src.lang, src.exhausted && src.read_chars < src.asked_chars ? ", all it has" : "", ")");
  }
  return s;
}

}  // namespace

absl::StatusOr<Tokenizer> train_tokenizer(const TrainingSample& sample, const TrainOptions& o,
                                          const std::string& out_dir, SampleSummary* summary) {
  if (o.model_type != "unigram" && o.model_type != "bpe")
    return absl::InvalidArgumentError("model_type: expected unigram or bpe, got '" + o.model_type + "'");
  if (o.vocab_size < 300) return absl::InvalidArgumentError("vocab_size: must be at least 300 (260 specials+bytes)");
  LM_RETURN_IF_ERROR(make_dir(out_dir));
  const std::string tsv_path = out_dir + "/normalization.tsv";
  LM_RETURN_IF_ERROR(write_file_atomic(tsv_path, nfc_rule_tsv()));

  std::string required;
  if (o.require_bengali) {
    std::set<uint32_t> seen;
    for (const auto& s : sample.sentences) {
      for (size_t i = 0; i < s.size();) {
        uint32_t cp = next_cp(s, i);
        if (cp >= 0x0980 && cp <= 0x09FF) seen.insert(cp);
      }
    }
    for (uint32_t cp : seen) {
      char buf[4] = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                     static_cast<char>(0x80 | (cp & 0x3F)), 0};
      required.append(buf, 3);
    }
    summary->required_chars = static_cast<int64_t>(seen.size());
  }
  auto kwargs = spm_kwargs(o, required, tsv_path);
  bridge::set_log_level(output_options().quiet ? 2 : 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::string model, error;
  if (!bridge::train(kwargs, sample.sentences, &model, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece training failed: ", error, " (",
                                                   describe_sample(sample), "; a vocabulary too large for the sample "
                                                   "fails here: lower --vocab-size (now ", o.vocab_size,
                                                   ") or add text to the short sources)"));
  }
  summary->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model = portable_model_bytes(model);  // the hash names the content, not the folder or --threads
  LM_RETURN_IF_ERROR(write_file_atomic(out_dir + "/" + kModelFile, model));
  LM_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_model_bytes(model, out_dir + "/" + kModelFile));
  TokenizerMeta meta;
  meta.model_type = o.model_type;
  meta.hash = tok.hash();
  meta.vocab_size = tok.vocab_size();
  meta.unk_id = tok.unk_id();
  meta.bos_id = tok.bos_id();
  meta.eos_id = tok.eos_id();
  meta.pad_id = tok.pad_id();
  meta.icu_version = icu_version();
  meta.framing = kFraming;  // recorded explicitly: a tokenizer.json without it reads as the old framing
  meta.recipe = o;
  meta.training = *summary;
  LM_RETURN_IF_ERROR(write_json_file(out_dir + "/" + kMetaFile, to_json(meta)));
  return Tokenizer::load(out_dir);
}

}  // namespace lm::tokenizer
