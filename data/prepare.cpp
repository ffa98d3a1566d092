#include "data/prepare.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

#include "absl/strings/str_format.h"
#include "core/file.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "corpus/decompress.h"
#include "tokenizer/tokenizer.h"

namespace lm::data {
namespace {

namespace fs = std::filesystem;

struct Batch {
  int source = 0;  // index into corpus.sources
  std::vector<std::string> docs;
  uint64_t bytes = 0;
};

// Bounded hand-off from the reader thread (decompress, UTF-8 check, NFC) to the encoder, so
// reading the next batch overlaps tokenizing this one.
class BatchQueue {
 public:
  explicit BatchQueue(size_t cap) : cap_(cap) {}
  // False when the consumer has cancelled.
  bool push(Batch b) {
    std::unique_lock<std::mutex> lk(mu_);
    not_full_.wait(lk, [&] { return q_.size() < cap_ || cancelled_; });
    if (cancelled_) return false;
    q_.push_back(std::move(b));
    not_empty_.notify_one();
    return true;
  }
  // False once the producer is done and the queue is empty.
  bool pop(Batch* b) {
    std::unique_lock<std::mutex> lk(mu_);
    not_empty_.wait(lk, [&] { return !q_.empty() || done_; });
    if (q_.empty()) return false;
    *b = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    not_empty_.notify_all();
  }
  void cancel() {
    std::lock_guard<std::mutex> lk(mu_);
    cancelled_ = true;
    not_full_.notify_all();
  }

 private:
  size_t cap_;
  std::deque<Batch> q_;
  bool done_ = false, cancelled_ = false;
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
};

// One open shard per (source, split); flushed to a file when it reaches shard_tokens. Shards are
// per source so the sampler can give each source its own weight (docs/data.md).
struct Output {
  std::string lang, split;
  ShardWriter writer;
  std::string source;  // corpus source id
  int next_index = 0;
  uint64_t docs = 0, tokens = 0;
};

// `path` relative to the folder `base` ("tok/" and "shards/" -> "../tok"); absolute if none exists.
std::string relative_to(const std::string& path, const std::string& base) {
  auto clean = [](const std::string& p) {
    fs::path a = fs::absolute(p).lexically_normal();
    return a.filename().empty() ? a.parent_path() : a;  // "shards/" -> "shards"
  };
  const fs::path rel = clean(path).lexically_relative(clean(base));
  return rel.empty() ? clean(path).string() : rel.string();
}

}  // namespace

bool is_validation_doc(const std::string& doc, double val_fraction) {
  if (val_fraction <= 0) return false;
  const uint64_t h = fnv1a64(doc.data(), doc.size());
  // fnv1a's low bits are weak on short inputs: fold the high half in before scaling to [0, 1).
  const uint64_t mixed = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL;
  return static_cast<double>(mixed >> 11) * 0x1.0p-53 < val_fraction;
}

namespace {

// Per source and per language counts. A language's share is its weight over the weights of the
// languages that have training tokens, and a source's share is its part of its language's share
// by weight among the language's sources that have tokens: an empty source's weight goes to its
// own language, so the language mix stays the asked one (issue 31). token_share is what the
// sampler draws by default, natural_share what is on disk.
void fill_report(const CorpusManifest& corpus, const std::vector<Output>& outputs, const std::vector<ReadStats>& stats,
                 ShardManifest& m) {
  double weight_total = 0;
  uint64_t train_total = 0;
  std::map<std::string, double> lang_weight, lang_weight_with_tokens;
  for (size_t i = 0; i < corpus.sources.size(); ++i) {
    lang_weight[corpus.sources[i].lang] += corpus.sources[i].weight;
    if (outputs[2 * i].tokens > 0) lang_weight_with_tokens[corpus.sources[i].lang] += corpus.sources[i].weight;
    train_total += outputs[2 * i].tokens;
  }
  for (const auto& [lang, w] : lang_weight_with_tokens) weight_total += lang_weight[lang];
  auto frac = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  for (size_t i = 0; i < corpus.sources.size(); ++i) {
    const CorpusSource& src = corpus.sources[i];
    const Output &train = outputs[2 * i], &val = outputs[2 * i + 1];
    SourceReport s{source_id(corpus, i), src.lang, src.weight, static_cast<uint64_t>(stats[i].documents),
                   static_cast<uint64_t>(stats[i].chars), train.tokens, val.tokens};
    s.share = train.tokens > 0 ? frac(lang_weight[src.lang], weight_total) *
                                     frac(src.weight, lang_weight_with_tokens[src.lang])
                               : 0.0;
    s.natural_share = frac(static_cast<double>(train.tokens), static_cast<double>(train_total));
    m.sources.push_back(s);
    LanguageReport& r = m.languages[src.lang];
    r.docs += stats[i].documents;
    r.chars += stats[i].chars;
    r.bytes += stats[i].bytes;
    r.train_tokens += train.tokens;
    r.train_docs += train.docs;
    r.val_tokens += val.tokens;
    r.val_docs += val.docs;
    r.weight = lang_weight_with_tokens.count(src.lang) ? lang_weight[src.lang] : 0.0;
    r.token_share += s.share;
    r.natural_share += s.natural_share;
    m.weights[src.lang] = r.weight;
  }
}

}  // namespace

namespace {

absl::Status check_options(const PrepareOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--val-fraction: %g, expected a number in [0, 1)", o.val_fraction));
  }
  if (o.shard_tokens < 1) return absl::InvalidArgumentError("--shard-tokens: expected >= 1");
  return absl::OkStatus();
}

constexpr const char* kStagingName = ".prepare.tmp";

// Shard files (*.lmtok) directly in `dir` that `m` does not list; removed after a new manifest.
std::vector<fs::path> unlisted_shards(const std::string& dir, const ShardManifest& m) {
  std::set<std::string> listed;
  for (const auto& e : m.shards) listed.insert(e.path);
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".lmtok" && !listed.count(e.path().filename().string()))
      out.push_back(e.path());
  return out;
}

// Shards are written into a staging folder inside `out` and moved in only once the whole corpus
// has been read: a bad line late in the corpus (or a full disk) must not replace shards of an
// existing folder. The staging folder is removed however prepare ends (a signal included: prepare
// asks `stop_signal` between batches); an `out` that prepare created is removed with it if empty.
class Staging {
 public:
  static absl::StatusOr<std::unique_ptr<Staging>> create(const std::string& out) {
    std::error_code ec;
    const bool existed = fs::exists(out, ec);
    fs::create_directories(out, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(out, ": cannot create the folder: ", ec.message()));
    const fs::path dir = fs::path(out) / kStagingName;
    LM_RETURN_IF_ERROR(remove_tree(dir.string()));  // left by a prepare killed outright (kill -9, a second Ctrl-C)
    fs::create_directories(dir, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(dir.string(), ": cannot create: ", ec.message()));
    return std::unique_ptr<Staging>(new Staging(dir, out, !existed));
  }
  ~Staging() { (void)discard(); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Removes the staging folder (and `out` when prepare created it and it is empty); returns what
  // was removed, for the message.
  std::string discard() {
    if (discarded_) return "";
    discarded_ = true;
    uint64_t files = 0, bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      if (!e.is_regular_file(ec)) continue;
      ++files;
      bytes += e.file_size(ec);
    }
    const absl::Status removed = remove_tree(dir_.string());
    std::string what = removed.ok() ? absl::StrFormat("removed %s (%d unfinished shard files, %.1f MB)", dir_.string(),
                                                      files, bytes / 1e6)
                                    : absl::StrFormat("could not remove %s: %s", dir_.string(), removed.message());
    if (created_out_ && fs::is_empty(out_, ec) && ::rmdir(out_.c_str()) == 0)
      return what + absl::StrFormat(" and %s, which this prepare had created", out_);
    return what + absl::StrFormat("; nothing else in %s was changed", out_);
  }
  // Moves every shard of `m` into the output folder, then writes manifest.json (last: a folder
  // whose manifest names a shard has that shard), then removes the shards it does not list (those
  // of a previous corpus, under --force).
  absl::Status commit(const ShardManifest& m) const {
    std::error_code ec;
    for (const auto& e : m.shards) {
      fs::rename(dir_ / e.path, fs::path(out_) / e.path, ec);
      if (ec) return absl::InternalError(absl::StrCat(path(e.path), ": cannot move into ", out_, ": ", ec.message()));
    }
    LM_RETURN_IF_ERROR(fsync_dir(out_));
    LM_RETURN_IF_ERROR(write_manifest(out_, m));
    const std::vector<fs::path> stale = unlisted_shards(out_, m);
    for (const auto& p : stale)
      if (::unlink(p.c_str()) != 0) return errno_status("unlink", p.string(), "the new manifest.json is complete");
    if (!stale.empty())
      log_info("prepare: removed %d shard files in %s that the new manifest.json does not list (a previous corpus's)",
               stale.size(), out_);
    return absl::OkStatus();
  }

 private:
  Staging(fs::path dir, std::string out, bool created_out)
      : dir_(std::move(dir)), out_(std::move(out)), created_out_(created_out) {}
  fs::path dir_;
  std::string out_;
  bool created_out_ = false;
  bool discarded_ = false;
};

// The manifest's header: the tokenizer's identity and framing, and where it is.
ShardManifest start_manifest(const tokenizer::Tokenizer& tok, const PrepareOptions& o) {
  ShardManifest m;
  m.tokenizer_hash = tok.hash();
  m.vocab_size = tok.vocab_size();
  m.eos_id = tok.eos_id();
  m.bos_id = tok.bos_id();
  m.framing = tok.framing();  // fit refuses a tokenizer whose framing differs (ShardSet::check_tokenizer)
  // Relative to the shards folder, so shards and tokenizer moved together (another machine, another
  // folder) still find each other; fit resolves it against the folder (ShardSet::tokenizer_path).
  m.tokenizer_dir = relative_to(o.tokenizer, o.out);
  return m;
}

// One Output per (source, split), index 2*source + (val ? 1 : 0); a full one is written to staging
// as the next shard of its source and split and entered in the manifest.
class Outputs {
 public:
  Outputs(const CorpusManifest& corpus, const tokenizer::Tokenizer& tok, const Staging& staging, ShardManifest& m,
          uint64_t shard_tokens)
      : staging_(staging), m_(m), shard_tokens_(shard_tokens) {
    for (size_t i = 0; i < corpus.sources.size(); ++i)
      for (const char* split : {"train", "val"})
        all.push_back(Output{corpus.sources[i].lang, split, ShardWriter(tok.vocab_size(), tok.hash()),
                             source_id(corpus, i)});
  }
  absl::Status add(int source, bool val, const std::vector<int32_t>& doc) {
    Output& out = all[2 * source + (val ? 1 : 0)];
    LM_RETURN_IF_ERROR(out.writer.add_document(doc));
    out.docs += 1;
    out.tokens += doc.size();
    return out.writer.n_tokens() >= shard_tokens_ ? flush(out) : absl::OkStatus();
  }
  absl::Status flush_all() {
    for (auto& out : all) LM_RETURN_IF_ERROR(flush(out));
    return absl::OkStatus();
  }
  std::vector<Output> all;

 private:
  absl::Status flush(Output& out) {
    if (out.writer.n_docs() == 0) return absl::OkStatus();
    const std::string name =
        absl::StrFormat("%s.%s.%s.%05d.lmtok", out.lang, out.source, out.split, out.next_index++);
    ShardEntry e{name, out.lang, out.split, out.writer.n_tokens(), out.writer.n_docs(), out.source};
    LM_RETURN_IF_ERROR(out.writer.write(staging_.path(name)));
    m_.shards.push_back(e);
    return absl::OkStatus();
  }
  const Staging& staging_;
  ShardManifest& m_;
  uint64_t shard_tokens_;
};

// The reader thread's work: documents of every source in manifest order, in batches of
// ~batch_bytes, into `queue` (closed at the end); stops early when the encoder cancels.
absl::Status read_corpus(const CorpusManifest& corpus, const PrepareOptions& o, BatchQueue& queue,
                         std::vector<ReadStats>& stats) {
  ReadOptions ro;
  ro.skip_invalid_utf8 = o.skip_invalid_utf8;
  ro.dedup = o.dedup;
  absl::Status status;
  for (size_t si = 0; si < corpus.sources.size() && status.ok(); ++si) {
    Batch b;
    b.source = static_cast<int>(si);
    bool cancelled = false;
    ReadStats st;
    status = for_each_document(corpus, corpus.sources[si], ro, [&](const std::string& doc) -> absl::Status {
      if (o.stop_signal && o.stop_signal() != 0) {
        cancelled = true;
        return stop_reading();
      }
      b.bytes += doc.size();
      b.docs.push_back(doc);
      if (static_cast<int64_t>(b.bytes) < o.batch_bytes) return absl::OkStatus();
      if (!queue.push(std::move(b))) {
        cancelled = true;
        return stop_reading();
      }
      b = Batch();
      b.source = static_cast<int>(si);
      return absl::OkStatus();
    }, &st);
    stats[si].add(st);
    if (status.ok() && (cancelled || (!b.docs.empty() && !queue.push(std::move(b))))) break;
  }
  queue.close();
  return status;
}

struct EncodeTotals {
  uint64_t bytes = 0, tokens = 0;
  double seconds = 0;
};

// The encoder: all cores on each batch, each document framed (bos + text + eos), split by its hash.
absl::StatusOr<EncodeTotals> encode_batches(const tokenizer::Tokenizer& tok, const PrepareOptions& o, int n_threads,
                                            uint64_t total_bytes, BatchQueue& queue, Outputs& outputs) {
  Progress progress("prepare", static_cast<double>(std::max<uint64_t>(total_bytes, 1)), "B");
  EncodeTotals t;
  auto rate = [&](double seconds) {
    return absl::StrFormat("%.2f MB/s, %s tokens", t.bytes / 1e6 / std::max(seconds, 1e-9),
                           format_count(static_cast<double>(t.tokens)));
  };
  Batch b;
  while (queue.pop(&b)) {
    const auto ids = tok.encode_batch(b.docs, n_threads);
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::vector<int32_t> doc = tok.frame(ids[i]);
      absl::Status st = outputs.add(b.source, is_validation_doc(b.docs[i], o.val_fraction), doc);
      if (!st.ok()) {
        queue.cancel();
        return st;
      }
      t.tokens += doc.size();
    }
    t.bytes += b.bytes;
    progress.update(static_cast<double>(std::min(t.bytes, total_bytes)), rate(progress.elapsed_s()));
    if (o.stop_signal && o.stop_signal() != 0) {
      queue.cancel();
      return absl::CancelledError("stopped by a signal");  // prepare() says what it removed
    }
  }
  t.seconds = progress.elapsed_s();
  progress.finish(rate(t.seconds));
  return t;
}

// manifest.json's "prepare": how the shards were made.
Json prepare_record(const PrepareOptions& o, int n_threads, const EncodeTotals& t, const ReadStats& all) {
  return Json{{"corpus", o.corpus},
              {"val_fraction", o.val_fraction},
              {"dedup", o.dedup},
              {"skip_invalid_utf8", o.skip_invalid_utf8},
              {"shard_tokens", o.shard_tokens},
              {"threads", n_threads},
              {"seconds", t.seconds},
              {"text_bytes", t.bytes},
              {"mb_per_s", t.bytes / 1e6 / std::max(t.seconds, 1e-9)},
              {"invalid_skipped", all.invalid_skipped},
              {"empty_dropped", all.empty_dropped},
              {"duplicates_dropped", all.duplicates_dropped},
              {"nulls_skipped", all.nulls_skipped},  // null values of Parquet text columns
              {"plan_tokens", o.plan_tokens}};
}

// What the user must see on screen, not only in manifest.json.
void warn_about(const CorpusManifest& corpus, const ShardManifest& m, const PrepareOptions& o, const ReadStats& all) {
  if (all.invalid_skipped > 0)  // a skip can hide a wrong file
    log_warn("prepare: skipped %ld lines of invalid UTF-8 (--skip-invalid-utf8) against %ld documents read%s",
             all.invalid_skipped, all.documents,
             all.invalid_skipped > all.documents ? ": most of the input is not text - is a file binary or in an unknown format?" : "");
  for (size_t i = 0; i < m.sources.size(); ++i) {
    if (m.sources[i].train_tokens > 0) continue;
    const LanguageReport& r = m.languages.at(m.sources[i].lang);
    log_warn("prepare: source %s has no training tokens; its weight %g goes to %s", describe_source(corpus, i),
             m.sources[i].weight,
             r.train_tokens > 0 ? "the other '" + m.sources[i].lang + "' sources (the language mix stays as asked)"
                                : "no source of its language: the other languages share it");
  }
  for (const auto& [lang, r] : m.languages) {
    if (r.train_tokens == 0) log_warn("prepare: language '%s' has no training tokens", lang);
    if (o.val_fraction > 0 && r.val_tokens == 0) {
      log_warn("prepare: language '%s' got no validation documents (raise --val-fraction)", lang);
    }
  }
}

uint64_t estimated_text_bytes(const CorpusManifest& corpus) {
  uint64_t total = 0;
  for (const auto& src : corpus.sources)
    for (const auto& p : resolve_paths(corpus, src)) total += estimated_uncompressed_bytes(p);
  return total;
}

}  // namespace

absl::StatusOr<ShardManifest> prepare(const PrepareOptions& o) {
  LM_RETURN_IF_ERROR(check_options(o));
  LM_ASSIGN_OR_RETURN(CorpusManifest corpus, load_manifest(o.corpus));
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(o.tokenizer));
  LM_ASSIGN_OR_RETURN(std::unique_ptr<Staging> staging, Staging::create(o.out));
  std::set<std::string> langs;
  for (const auto& src : corpus.sources) langs.insert(src.lang);
  const uint64_t total_bytes = estimated_text_bytes(corpus);
  const int n_threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  log_info("prepare: %d sources, %d languages, ~%.1f MB of text, tokenizer %s (vocab %d, documents as %s), %d threads",
           corpus.sources.size(), langs.size(), total_bytes / 1e6, tok.hash(), tok.vocab_size(),
           tok.framing().describe(), n_threads);

  ShardManifest m = start_manifest(tok, o);
  Outputs outputs(corpus, tok, *staging, m, o.shard_tokens);
  BatchQueue queue(2);  // reading the next batch overlaps encoding this one
  std::vector<ReadStats> stats(corpus.sources.size());
  absl::Status read_status;
  std::thread reader([&] { read_status = read_corpus(corpus, o, queue, stats); });
  auto encoded = encode_batches(tok, o, n_threads, total_bytes, queue, outputs);
  reader.join();
  if (const int sig = o.stop_signal ? o.stop_signal() : 0; sig != 0)
    return absl::CancelledError(
        absl::StrFormat("prepare stopped by signal %d before the shards were complete: %s", sig, staging->discard()));
  LM_RETURN_IF_ERROR(read_status);
  LM_RETURN_IF_ERROR(encoded.status());
  if (encoded->tokens == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        o.corpus, ": the corpus has no documents (its files are empty or hold only blank lines); nothing written"));
  LM_RETURN_IF_ERROR(outputs.flush_all());

  ReadStats all;
  for (const auto& st : stats) all.add(st);
  fill_report(corpus, outputs.all, stats, m);
  m.prepare = prepare_record(o, n_threads, *encoded, all);
  if (o.plan_tokens > 0) {
    const std::vector<Passes> rows = compute_passes(mixture_parts(m), o.plan_tokens);
    m.prepare["passes"] = passes_to_json(rows, o.plan_tokens);
    warn_passes(rows, o.plan_tokens, "prepare --plan-tokens");
  }
  warn_about(corpus, m, o, all);
  if (all.duplicates_dropped > 0)
    log_info("prepare: dropped %ld exact duplicate documents of %ld read (dedup, the default; --no-dedup keeps them)",
             all.duplicates_dropped, all.documents + all.duplicates_dropped);
  LM_RETURN_IF_ERROR(staging->commit(m));
  return m;
}

absl::Status check_output_folder(const std::string& out, bool force) {
  std::error_code ec;
  if (force || !fs::exists(out, ec)) return absl::OkStatus();
  if (!fs::is_directory(out, ec))
    return absl::FailedPreconditionError(out + ": is a file; --out names the folder the shards go to");
  std::vector<std::string> others;
  int64_t shards = 0;
  bool manifest = false;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kStagingName) continue;  // an interrupted prepare's: removed when this one starts
    if (name == "manifest.json") manifest = true;
    else if (e.path().extension() == ".lmtok") ++shards;
    else others.push_back(name + (e.is_directory(ec) ? "/" : ""));
  }
  if (manifest || shards > 0)
    return absl::AlreadyExistsError(absl::StrFormat(
        "%s: already holds shards (%s%d shard files; runs trained on them would silently change); write to another "
        "folder, or pass --force to replace them (shards the new manifest does not list are removed, other files "
        "are left alone)", out, manifest ? "manifest.json, " : "no manifest.json, ", shards));
  if (others.empty()) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrFormat(
      "%s: is not empty: it holds %s and no shards (no manifest.json, no .lmtok file); name an empty or new folder, "
      "or pass --force to write the shards beside what is there (it is left alone)", out, name_list(others, 3)));
}

std::vector<MixturePart> mixture_parts(const ShardManifest& m) {
  std::vector<MixturePart> parts;
  for (const auto& s : m.sources) parts.push_back({s.lang, s.id, s.share, s.train_tokens});
  if (parts.empty()) {  // an older manifest: per-language weights
    for (const auto& [lang, r] : m.languages) parts.push_back({lang, "", r.token_share, r.train_tokens});
  }
  return parts;
}

std::string format_report(const ShardManifest& m) {
  std::string s = absl::StrFormat("%-6s %9s %12s %12s %12s %10s %8s %7s %8s %8s\n", "lang", "docs", "chars",
                                  "train tok", "val tok", "val docs", "tok/char", "weight", "natural",
                                  "sampled");
  for (const auto& [lang, r] : m.languages) {
    const double per_char = r.chars > 0 ? static_cast<double>(r.train_tokens + r.val_tokens) / r.chars : 0;
    s += absl::StrFormat("%-6s %9d %12d %12d %12d %10d %8.3f %7.3g %7.1f%% %7.1f%%\n", lang, r.docs, r.chars,
                         r.train_tokens, r.val_tokens, r.val_docs, per_char, r.weight, 100 * r.natural_share,
                         100 * r.token_share);
  }
  if (!m.sources.empty()) {
    s += absl::StrFormat("\n%-28s %-6s %9s %12s %12s %7s %8s %8s\n", "source", "lang", "docs", "train tok",
                         "val tok", "weight", "natural", "share");
    for (const auto& r : m.sources) {
      s += absl::StrFormat("%-28s %-6s %9d %12d %12d %7.3g %7.1f%% %7.1f%%\n", r.id, r.lang, r.docs,
                           r.train_tokens, r.val_tokens, r.weight, 100 * r.natural_share, 100 * r.share);
    }
  }
  const double plan = m.prepare.is_object() ? m.prepare.value("plan_tokens", 0.0) : 0.0;
  if (plan > 0) s += "\n" + format_passes(compute_passes(mixture_parts(m), plan), plan, "prepare --plan-tokens");
  return s;
}

absl::StatusOr<std::string> verify_shards(const std::string& dir, const std::string& tokenizer_dir) {
  LM_ASSIGN_OR_RETURN(ShardSet set, ShardSet::open(dir, /*verify_checksum=*/true));
  if (!tokenizer_dir.empty()) {
    LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(tokenizer_dir));
    LM_RETURN_IF_ERROR(set.check_tokenizer(tok));
  }
  std::string s = absl::StrFormat("%s: %d shards verified (header, offsets, payload CRC, ids < vocab %d), "
                                  "tokenizer %s, documents framed as %s\n",
                                  dir, set.manifest().shards.size(), set.vocab_size(), set.tokenizer_hash(),
                                  set.framing().describe());
  for (const auto& d : set.datasets()) {
    s += absl::StrFormat("  %-6s %-5s %3d shards %14d tokens\n", d.lang, d.split, d.shards.size(), d.tokens);
  }
  return s;
}

}  // namespace lm::data
