#include "data/prepare.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

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

// Per source and per language counts. A source's share is its weight over the weights of the
// sources that have training tokens: an empty source adds no weight. token_share is what the
// sampler draws by default, natural_share what is on disk.
void fill_report(const CorpusManifest& corpus, const std::vector<Output>& outputs, const std::vector<ReadStats>& stats,
                 ShardManifest& m) {
  double weight_total = 0;
  uint64_t train_total = 0;
  for (size_t i = 0; i < corpus.sources.size(); ++i) {
    if (outputs[2 * i].tokens > 0) weight_total += corpus.sources[i].weight;
    train_total += outputs[2 * i].tokens;
  }
  auto frac = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  for (size_t i = 0; i < corpus.sources.size(); ++i) {
    const CorpusSource& src = corpus.sources[i];
    const Output &train = outputs[2 * i], &val = outputs[2 * i + 1];
    SourceReport s{source_id(corpus, i), src.lang, src.weight, static_cast<uint64_t>(stats[i].documents),
                   static_cast<uint64_t>(stats[i].chars), train.tokens, val.tokens};
    s.share = train.tokens > 0 ? frac(src.weight, weight_total) : 0.0;
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
    r.weight += train.tokens > 0 ? src.weight : 0.0;
    r.token_share += s.share;
    r.natural_share += s.natural_share;
    m.weights[src.lang] += train.tokens > 0 ? src.weight : 0.0;
  }
}

}  // namespace

absl::StatusOr<ShardManifest> prepare(const PrepareOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--val-fraction: %g, expected a number in [0, 1)", o.val_fraction));
  }
  if (o.shard_tokens < 1) return absl::InvalidArgumentError("--shard-tokens: expected >= 1");
  LM_ASSIGN_OR_RETURN(CorpusManifest corpus, load_manifest(o.corpus));
  LM_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(o.tokenizer));
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(o.out, ": cannot create the folder: ", ec.message()));
  // Shards are written into a staging folder and moved in only once the whole corpus has been read:
  // a bad line late in the corpus (or a full disk) must not replace shards of an existing folder.
  const fs::path staging = fs::path(o.out) / ".prepare.tmp";
  LM_RETURN_IF_ERROR(remove_tree(staging.string()));
  fs::create_directories(staging, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(staging.string(), ": cannot create: ", ec.message()));
  struct RemoveOnExit {
    fs::path dir;
    ~RemoveOnExit() { (void)remove_tree(dir.string()); }
  } remove_staging{staging};

  std::set<std::string> langs;
  uint64_t total_bytes = 0;
  for (const auto& src : corpus.sources) {
    langs.insert(src.lang);
    for (const auto& p : resolve_paths(corpus, src)) total_bytes += estimated_uncompressed_bytes(p);
  }
  const int n_threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  log_info("prepare: %d sources, %d languages, ~%.1f MB of text, tokenizer %s (vocab %d), %d threads",
           corpus.sources.size(), langs.size(), total_bytes / 1e6, tok.hash(), tok.vocab_size(), n_threads);

  ShardManifest m;
  m.tokenizer_hash = tok.hash();
  m.vocab_size = tok.vocab_size();
  m.eos_id = tok.eos_id();
  m.bos_id = tok.bos_id();
  // Relative to the shards folder, so shards and tokenizer moved together (another machine, another
  // folder) still find each other; fit resolves it against the folder (ShardSet::tokenizer_path).
  m.tokenizer_dir = relative_to(o.tokenizer, o.out);

  std::vector<Output> outputs;  // index 2*source + (val ? 1 : 0)
  for (size_t i = 0; i < corpus.sources.size(); ++i) {
    for (const char* split : {"train", "val"}) {
      outputs.push_back(
          Output{corpus.sources[i].lang, split, ShardWriter(tok.vocab_size(), tok.hash()), source_id(corpus, i)});
    }
  }
  auto flush = [&](Output& out) -> absl::Status {
    if (out.writer.n_docs() == 0) return absl::OkStatus();
    const std::string name =
        absl::StrFormat("%s.%s.%s.%05d.lmtok", out.lang, out.source, out.split, out.next_index++);
    ShardEntry e{name, out.lang, out.split, out.writer.n_tokens(), out.writer.n_docs(), out.source};
    LM_RETURN_IF_ERROR(out.writer.write((staging / name).string()));
    m.shards.push_back(e);
    return absl::OkStatus();
  };

  // Reader thread: documents of every source in manifest order, in batches of ~batch_bytes.
  BatchQueue queue(2);
  std::vector<ReadStats> stats(corpus.sources.size());
  absl::Status read_status;
  std::thread reader([&] {
    ReadOptions ro;
    ro.skip_invalid_utf8 = o.skip_invalid_utf8;
    ro.dedup = o.dedup;
    for (size_t si = 0; si < corpus.sources.size(); ++si) {
      const CorpusSource& src = corpus.sources[si];
      Batch b;
      b.source = static_cast<int>(si);
      bool cancelled = false;
      ReadStats st;
      absl::Status s = for_each_document(corpus, src, ro, [&](const std::string& doc) -> absl::Status {
        b.bytes += doc.size();
        b.docs.push_back(doc);
        if (static_cast<int64_t>(b.bytes) >= o.batch_bytes) {
          if (!queue.push(std::move(b))) {
            cancelled = true;
            return stop_reading();
          }
          b = Batch();
          b.source = static_cast<int>(si);
        }
        return absl::OkStatus();
      }, &st);
      stats[si].add(st);
      if (!s.ok()) {
        read_status = s;
        break;
      }
      if (cancelled || (!b.docs.empty() && !queue.push(std::move(b)))) break;
    }
    queue.close();
  });

  // Encoder: all cores on each batch, EOS after every document, split by document hash.
  Progress progress("prepare", static_cast<double>(std::max<uint64_t>(total_bytes, 1)), "B");
  uint64_t done_bytes = 0, done_tokens = 0;
  absl::Status st;
  Batch b;
  while (st.ok() && queue.pop(&b)) {
    const auto ids = tok.encode_batch(b.docs, n_threads);
    for (size_t i = 0; i < ids.size() && st.ok(); ++i) {
      Output& out = outputs[2 * b.source + (is_validation_doc(b.docs[i], o.val_fraction) ? 1 : 0)];
      std::vector<int32_t> doc = ids[i];
      doc.push_back(tok.eos_id());
      st = out.writer.add_document(doc);
      out.docs += 1;
      out.tokens += doc.size();
      done_tokens += doc.size();
      if (st.ok() && out.writer.n_tokens() >= o.shard_tokens) st = flush(out);
    }
    done_bytes += b.bytes;
    progress.update(static_cast<double>(std::min(done_bytes, total_bytes)),
                    absl::StrFormat("%.2f MB/s, %s tokens", done_bytes / 1e6 / std::max(progress.elapsed_s(), 1e-9),
                                    format_count(static_cast<double>(done_tokens))));
  }
  if (!st.ok()) queue.cancel();
  reader.join();
  LM_RETURN_IF_ERROR(read_status);
  LM_RETURN_IF_ERROR(st);
  if (done_tokens == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        o.corpus, ": the corpus has no documents (its files are empty or hold only blank lines); nothing written"));
  for (auto& out : outputs) LM_RETURN_IF_ERROR(flush(out));
  const double seconds = progress.elapsed_s();
  progress.finish(absl::StrFormat("%.2f MB/s, %s tokens", done_bytes / 1e6 / std::max(seconds, 1e-9),
                                  format_count(static_cast<double>(done_tokens))));

  ReadStats all;
  for (const auto& st_i : stats) all.add(st_i);
  fill_report(corpus, outputs, stats, m);
  m.prepare = Json{{"corpus", o.corpus},
                   {"val_fraction", o.val_fraction},
                   {"dedup", o.dedup},
                   {"skip_invalid_utf8", o.skip_invalid_utf8},
                   {"shard_tokens", o.shard_tokens},
                   {"threads", n_threads},
                   {"seconds", seconds},
                   {"text_bytes", done_bytes},
                   {"mb_per_s", done_bytes / 1e6 / std::max(seconds, 1e-9)},
                   {"invalid_skipped", all.invalid_skipped},
                   {"empty_dropped", all.empty_dropped},
                   {"duplicates_dropped", all.duplicates_dropped},
                   {"plan_tokens", o.plan_tokens}};
  if (o.plan_tokens > 0) {
    const std::vector<Passes> rows = compute_passes(mixture_parts(m), o.plan_tokens);
    m.prepare["passes"] = passes_to_json(rows, o.plan_tokens);
    warn_passes(rows, o.plan_tokens, "prepare --plan-tokens");
  }
  if (all.invalid_skipped > 0)  // on screen, not only in manifest.json: a skip can hide a wrong file
    log_warn("prepare: skipped %ld lines of invalid UTF-8 (--skip-invalid-utf8) against %ld documents read%s",
             all.invalid_skipped, all.documents,
             all.invalid_skipped > all.documents ? ": most of the input is not text - is a file binary or in an unknown format?" : "");
  for (size_t i = 0; i < m.sources.size(); ++i) {
    if (m.sources[i].train_tokens > 0) continue;
    log_warn("prepare: source %s has no training tokens; its weight %g adds nothing to the mixture (the other "
             "sources share it)", describe_source(corpus, i), m.sources[i].weight);
  }
  for (const auto& [lang, r] : m.languages) {
    if (r.train_tokens == 0) log_warn("prepare: language '%s' has no training tokens", lang);
    if (o.val_fraction > 0 && r.val_tokens == 0) {
      log_warn("prepare: language '%s' got no validation documents (raise --val-fraction)", lang);
    }
  }
  for (const auto& e : m.shards) {
    fs::rename(staging / e.path, fs::path(o.out) / e.path, ec);
    if (ec) return absl::InternalError(absl::StrCat((staging / e.path).string(), ": cannot move into ", o.out, ": ", ec.message()));
  }
  LM_RETURN_IF_ERROR(fsync_dir(o.out));
  LM_RETURN_IF_ERROR(write_manifest(o.out, m));
  return m;
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
    LM_RETURN_IF_ERROR(set.check_tokenizer(tok.hash(), tok.vocab_size()));
  }
  std::string s = absl::StrFormat("%s: %d shards verified (header, offsets, payload CRC, ids < vocab %d), "
                                  "tokenizer %s\n",
                                  dir, set.manifest().shards.size(), set.vocab_size(), set.tokenizer_hash());
  for (const auto& d : set.datasets()) {
    s += absl::StrFormat("  %-6s %-5s %3d shards %14d tokens\n", d.lang, d.split, d.shards.size(), d.tokens);
  }
  return s;
}

}  // namespace lm::data
