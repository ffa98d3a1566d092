#include "tokenizer/extend.h"

#include <sys/stat.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <chrono>
#include <cstdio>

#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "corpus/corpus.h"
#include "tokenizer/extend_internal.h"
#include "tokenizer/import_hf.h"
#include "tokenizer/train.h"

namespace lm::tokenizer {

absl::StatusOr<std::string> split_pattern(const std::string& name) {
  if (name == "llama3-marks") return std::string(kLlama3MarksPattern);
  if (name == "qwen35") return std::string(kQwen35Pattern);
  if (name == "gpt-4o") return std::string(kGpt4oPattern);
  return absl::InvalidArgumentError(absl::StrCat("--split: '", name,
                                                 "' is not one of llama3-marks, qwen35, gpt-4o (docs/tokenizer.md, "
                                                 "\"Vocabulary extension\")"));
}

bool guard_allows(std::string_view bytes, const std::string& guard) {
  const bool bengali_letters = guard == "marks+bengali", bengali_block = guard == "bengali";
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const int32_t len = static_cast<int32_t>(bytes.size());
  for (int32_t i = 0; i < len;) {
    UChar32 c;
    U8_NEXT(s, i, len, c);  // a partial code point at either end decodes to c < 0 and holds nothing
    if (c < 0) continue;
    const uint32_t gc = U_GET_GC_MASK(c);
    if (gc & U_GC_M_MASK) return true;
    const bool bengali = c >= 0x0980 && c <= 0x09FF;
    if (bengali && (bengali_block || (bengali_letters && (gc & U_GC_L_MASK)))) return true;
  }
  return false;
}

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::Status check_options(const ExtendOptions& o) {
  if (o.add <= 0 || o.add > kMaxAdd)
    return absl::InvalidArgumentError(absl::StrCat("--add: ", o.add, " new tokens: give 1 to ", kMaxAdd,
                                                   " (e.g. 32000: docs/tokenizer.md, \"Vocabulary extension\")"));
  if (o.guard != "auto" && o.guard != "marks" && o.guard != "marks+bengali" && o.guard != "bengali")
    return absl::InvalidArgumentError(
        absl::StrCat("--guard: '", o.guard, "' is not auto, marks, marks+bengali or bengali"));
  if (o.sample_chars <= 0) return absl::InvalidArgumentError("--sample-chars: must be positive");
  if (o.min_count < 1) return absl::InvalidArgumentError("--min-count: must be at least 1");
  if (o.corpus.empty()) return absl::InvalidArgumentError("--corpus: required with --extend (the text to learn from)");
  return split_pattern(o.split).status();
}

// An HF checkpoint folder (its own tokenizer.json with a "model", or only a tokenizer.model)
// rather than an lmforge tokenizer folder.
bool is_hf_folder(const std::string& dir) {
  const std::string meta = dir + "/" + kMetaFile;
  if (!exists(meta)) return exists(dir + "/" + kForeignSpmFile);
  auto text = read_file(meta);
  if (!text.ok()) return false;
  const Json j = Json::parse(*text, nullptr, false);
  return j.is_object() && j.contains("model");
}

// `dir` is read; `where` names it in messages (the user's folder, not a temporary import).
absl::StatusOr<BaseTokenizer> load_base(const std::string& dir, const std::string& where) {
  if (exists(dir + "/" + kExtensionFile))
    return absl::FailedPreconditionError(absl::StrCat(dir, ": already extended (", kExtensionFile,
                                                      " is there); extend the base instead (the folder made by "
                                                      "'lmtrain tokenizer --import')"));
  BaseTokenizer b;
  b.dir = dir;
  auto loaded = Tokenizer::load(dir);
  if (!loaded.ok())
    return absl::Status(loaded.status().code(),
                        absl::StrCat("base tokenizer: ", loaded.status().message()));
  b.tok = *std::move(loaded);
  LM_ASSIGN_OR_RETURN(std::string meta_text, read_file(dir + "/" + kMetaFile));
  b.meta = Json::parse(meta_text);
  if (b.tok.type() != kTypeHfBpe) {
    if (!b.tok.spm_words())
      return absl::UnimplementedError(absl::StrCat(
          where, ": a SentencePiece model that is not a BPE tokenizer.model with Llama 2's settings (identity "
          "normalizer, whitespace-split words, no user-defined pieces): extending it is not implemented; extend "
          "Llama 2's tokenizer.model or a byte-level BPE base (Llama 3, Qwen2)"));
    LM_ASSIGN_OR_RETURN(b.spm_bytes, read_file(dir + "/" + b.meta.value("model_file", std::string(kForeignSpmFile))));
    return b;
  }
  const HfBpe& hf = *b.tok.hf();
  if (b.tok.vocab_size() < hf.vocab_size())
    return absl::FailedPreconditionError(absl::StrCat(where, "/", kMetaFile, ": vocab_size ", b.tok.vocab_size(),
                                                      " is below the tokenizer's ", hf.vocab_size(),
                                                      " ids (the tokenizer does not belong to the checkpoint)"));
  LM_ASSIGN_OR_RETURN(std::string hf_text, read_file(dir + "/" + kHfJsonFile));
  b.hf_json = Json::parse(hf_text);
  return b;
}

// The corpus sample (bounded: sample_chars code points), as `lmtrain tokenizer` reads it.
absl::StatusOr<TrainingSample> read_corpus(const ExtendOptions& o) {
  LM_ASSIGN_OR_RETURN(data::CorpusManifest manifest, data::load_manifest(o.corpus));
  TrainOptions t;
  t.sample_chars = o.sample_chars;
  t.heldout_every = o.heldout_every;
  LM_ASSIGN_OR_RETURN(TrainingSample sample, build_sample(manifest, t));
  int64_t chars = 0;
  for (const auto& l : sample.summary.languages) chars += l.chars;
  log_info("read %s: %s code points in %zu lines (at most --sample-chars %s are read and kept in memory)", o.corpus,
           format_count(static_cast<double>(chars)), sample.sentences.size(),
           format_count(static_cast<double>(o.sample_chars)));
  return sample;
}

// Cuts the sample with the new split and counts the words a new token could ever reach (those
// the guard allows); each distinct word is then encoded by the base BPE.
Corpus count_words(const TrainingSample& s, const HfBpe& base, const Splitter& split, const std::string& guard) {
  absl::flat_hash_map<std::string, int64_t> counts;
  Corpus c;
  std::vector<Span> spans;
  for (const std::string& line : s.sentences) {
    const std::string text = base.normalizer() == "nfc" ? data::nfc(line) : line;
    spans.clear();
    split.split(text, &spans);
    c.words += static_cast<int64_t>(spans.size());
    for (const Span& sp : spans) {
      std::string_view piece(text.data() + sp.begin, sp.end - sp.begin);
      if (guard_allows(piece, guard)) ++counts[absl::string_view(piece.data(), piece.size())];
    }
  }
  c.text.reserve(counts.size());
  for (auto& [w, n] : counts) {
    c.text.push_back(w);
    c.bag.counts.push_back(n);
    c.bag.ids.emplace_back();
    base.encode_word(w, &c.bag.ids.back());
  }
  return c;
}

std::function<void(int64_t, int64_t, int64_t)> progress_printer() {
  const auto t0 = std::chrono::steady_clock::now();
  return [t0](int64_t done, int64_t total, int64_t count) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = done / std::max(s, 1e-3);
    log_info("  merges %ld / %ld (the last pair seen %ld times), %.0f merges/s, ETA %s", static_cast<long>(done),
             static_cast<long>(total), static_cast<long>(count), rate,
             format_duration(static_cast<double>(total - done) / std::max(rate, 1e-9)));
  };
}

NewTokens train(const Corpus& corpus, const BaseTokenizer& b, const ExtendOptions& o) {
  const HfBpe& hf = *b.tok.hf();
  std::vector<std::string> bytes(static_cast<size_t>(hf.vocab_size()));
  absl::flat_hash_set<std::string> taken;
  for (int32_t id = 0; id < hf.vocab_size(); ++id) {
    bytes[id] = hf.token_bytes(id);
    if (!bytes[id].empty()) taken.insert(bytes[id]);
  }
  MergeTrainOptions m;
  m.merges = o.add;
  m.first_id = b.tok.vocab_size();
  m.min_count = o.min_count;
  m.allowed = [guard = o.guard](std::string_view s) { return guard_allows(s, guard); };
  m.progress = progress_printer();
  WordBag bag = corpus.bag;  // the trainer merges its copy in place
  NewTokens t;
  t.first_id = m.first_id;
  t.merges = learn_merges(bag, bytes, taken, m);
  for (const NewMerge& nm : t.merges) t.bytes.push_back(bytes[nm.id]);
  return t;
}

absl::Status move_into_place(const std::string& tmp, const std::string& out) {
  if (exists(out)) LM_RETURN_IF_ERROR(remove_tree(out));  // empty, or --force
  if (::rename(tmp.c_str(), out.c_str()) != 0) return errno_status("rename", tmp, "the base is intact");
  return absl::OkStatus();
}

// The folder in `tmp`, checked by loading it, then renamed to o.out.
absl::Status write_all(const ExtensionWriter& write, const TrainingSample& sample, const ExtendOptions& o,
                       const std::string& tmp, ExtendResult& r) {
  LM_ASSIGN_OR_RETURN(r.pruned, write(tmp));
  LM_ASSIGN_OR_RETURN(r.extended, Tokenizer::load(tmp));
  LM_RETURN_IF_ERROR(write_extension_report(r, sample, o, tmp));
  return move_into_place(tmp, o.out);
}

// The byte-level BPE path: new merges after the base's, under the new split pattern.
absl::StatusOr<ExtensionWriter> prepare_bpe_extension(const ExtendOptions& o, const BaseTokenizer& b,
                                                      const TrainingSample& sample, ExtendResult& r) {
  LM_ASSIGN_OR_RETURN(const std::string pattern, split_pattern(o.split));
  LM_ASSIGN_OR_RETURN(Splitter split, Splitter::make(pattern, "--split"));
  auto corpus = std::make_shared<Corpus>(count_words(sample, *b.tok.hf(), split, o.guard));
  log_info("%s words, %s distinct ones can take a new token (guard %s); learning up to %ld merges after the base's %zu",
           format_count(static_cast<double>(corpus->words)), format_count(static_cast<double>(corpus->text.size())),
           o.guard, static_cast<long>(o.add), b.tok.hf()->merge_count());
  auto tokens = std::make_shared<NewTokens>(train(*corpus, b, o));
  r.learned = static_cast<int64_t>(tokens->merges.size());
  r.split = o.split;
  r.words = corpus->words;
  r.distinct_words = static_cast<int64_t>(corpus->text.size());
  return ExtensionWriter([&b, tokens, corpus, o, pattern](const std::string& dir) {
    return write_extension(b, *tokens, *corpus, o, pattern, dir);
  });
}

// --guard auto: marks+bengali for a byte-level BPE (Bengali digits keep the base's byte merges),
// bengali for a SentencePiece base (Llama 2 spells each Bengali digit in three byte tokens).
ExtendOptions resolve_guard(const ExtendOptions& o, bool spm) {
  ExtendOptions r = o;
  if (r.guard == "auto") r.guard = spm ? "bengali" : "marks+bengali";
  return r;
}

absl::StatusOr<std::string> import_if_hf(const ExtendOptions& o, std::string* imported) {
  if (!is_hf_folder(o.base)) return o.base;
  *imported = o.out + ".base-import";
  LM_RETURN_IF_ERROR(remove_tree(*imported));
  log_info("%s is an HF checkpoint folder: importing its tokenizer first (lmtrain tokenizer --import)", o.base);
  LM_RETURN_IF_ERROR(import_hf_tokenizer({o.base, *imported, false}).status());
  return *imported;
}

}  // namespace

absl::StatusOr<ExtendResult> extend_tokenizer(const ExtendOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  LM_RETURN_IF_ERROR(check_options(o));
  LM_RETURN_IF_ERROR(check_new_output(o.out, o.force, "a tokenizer"));
  std::string imported;
  LM_ASSIGN_OR_RETURN(const std::string base_dir, import_if_hf(o, &imported));
  auto base = load_base(base_dir, o.base);
  if (!imported.empty()) LM_RETURN_IF_ERROR(remove_tree(imported));
  LM_RETURN_IF_ERROR(base.status());
  const bool spm = base->tok.type() == kTypeSentencePiece;
  if (!spm) LM_RETURN_IF_ERROR(check_base_json(*base, o.base));
  const ExtendOptions ro = resolve_guard(o, spm);
  LM_ASSIGN_OR_RETURN(TrainingSample sample, read_corpus(ro));
  ExtendResult r;
  r.base = base->tok;
  LM_ASSIGN_OR_RETURN(ExtensionWriter write, spm ? prepare_spm_extension(ro, *base, sample, r)
                                                 : prepare_bpe_extension(ro, *base, sample, r));
  const std::string tmp = o.out + ".tmp-extend";
  LM_RETURN_IF_ERROR(remove_tree(tmp));
  if (absl::Status s = write_all(write, sample, ro, tmp, r); !s.ok()) {
    (void)remove_tree(tmp);  // a failed extension leaves nothing behind
    return s;
  }
  LM_ASSIGN_OR_RETURN(r.extended, Tokenizer::load(o.out));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace lm::tokenizer
