// Corpus manifest (corpus.json) and the text readers shared by the tokenizer trainer and the
// data pipeline. Library lm_corpus: lm_core + ICU (NFC) + zlib (.gz); no torch, no SentencePiece,
// so lm_tokenizer and lm_data can both use it without a dependency cycle (docs/tokenizer.md).
//
// corpus.json:
//   {"sources": [
//     {"paths": ["bn/*.txt.gz"], "format": "lines", "lang": "bn", "weight": 2.0},
//     {"paths": ["en/wiki.jsonl.gz"], "format": "jsonl", "text_field": "text", "lang": "en"},
//     {"paths": ["en/fineweb/*.parquet"], "column": "text", "lang": "en"}]}
// A Parquet file (by its magic bytes, corpus/parquet.h) gives one document per non-null value of
// `column`, whatever `format` says; the other files are text in `format`.
// Paths are relative to the manifest's folder (absolute paths are kept as they are).
//
// One meaning of weight: a source's share of the mixture is weight / (sum of the weights of the
// sources that have text), the same in the tokenizer's sample (characters) and in training
// (windows drawn); a language's share is the sum over its sources (docs/data.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lm::data {

struct CorpusSource {
  std::vector<std::string> paths;  // files or glob patterns, relative to the manifest's folder
  std::string format = "lines";    // "lines" (one doc per line) | "paragraphs" (blank-line separated) | "jsonl"
  std::string text_field = "text"; // for jsonl: the string field that holds the document
  std::string column = "text";     // for Parquet files (by magic bytes, any format): the string column
  std::string lang;                // language tag, e.g. "bn", "en" (required)
  double weight = 1.0;             // share of the mixture = weight / sum of weights (> 0)
  std::string name;                // optional id in reports, shard names and the data cursor
                                   // (default: see source_id); letters, digits, '_' and '-'
  template <class V>
  void visit(V& v) {
    v("name", name);
    v("paths", paths);
    v("format", format);
    v("text_field", text_field);
    v("column", column);
    v("lang", lang);
    v("weight", weight);
  }
};

struct CorpusManifest {
  std::vector<CorpusSource> sources;
  std::string base_dir;  // folder of the manifest file; not serialised
  template <class V>
  void visit(V& v) {
    v("sources", sources);
  }
};

// Reads corpus.json strictly: unknown keys, wrong types, a missing `lang`, a bad `format`, a
// weight <= 0, a bad or repeated name and a path or glob that matches no file are errors naming
// the dotted path ("corpus.json: sources[1].weight: ...").
absl::StatusOr<CorpusManifest> load_manifest(const std::string& path);

// The id of sources[i]: its `name`, else the file name of its first path without extensions
// ("bn/news.txt.gz" -> "news") when that is a valid, unique id, else "<lang>-<k>" (k-th source
// of the language, from 1). Stable for a given manifest; validate_manifest rejects clashes.
std::string source_id(const CorpusManifest& manifest, size_t i);

// For messages: "'news' (sources[0], bn, bn/news.txt.gz)".
std::string describe_source(const CorpusManifest& manifest, size_t i);

// Checks a manifest built in code (load_manifest calls it); `where` prefixes messages.
absl::Status validate_manifest(const CorpusManifest& manifest, const std::string& where);

// The files of a source: each pattern resolved against base_dir and glob-expanded (sorted, each
// file once). Empty when nothing matches; load_manifest already rejects that case, and
// for_each_document reports it as NotFound.
std::vector<std::string> resolve_paths(const CorpusManifest& manifest, const CorpusSource& source);

// The longest document (and line) a corpus reader takes, in bytes: a 200 MB line without a
// newline grew prepare's memory without bound (issue 40). Over it, reading stops with an error
// naming file:line.
inline constexpr size_t kMaxDocumentBytes = size_t{64} << 20;

struct ReadOptions {
  bool skip_invalid_utf8 = false;  // false: invalid UTF-8 is an error naming file:line
  bool dedup = false;              // drop exact duplicate documents (64-bit content hash)
};

struct ReadStats {
  int64_t documents = 0;           // documents passed to the callback
  int64_t bytes = 0;               // UTF-8 bytes of those documents (after NFC)
  int64_t chars = 0;               // Unicode code points of those documents
  int64_t invalid_skipped = 0;     // lines skipped for invalid UTF-8 (skip_invalid_utf8)
  int64_t empty_dropped = 0;       // empty or whitespace-only documents
  int64_t duplicates_dropped = 0;  // exact duplicates (dedup)
  int64_t nulls_skipped = 0;       // null values of a Parquet file's column (each file's count is logged)
  void add(const ReadStats& o);
};

// Calls fn for every document (NFC-normalised UTF-8) of every file of the source, in file
// order; compressed files are decompressed transparently, Parquet files read by column. An error
// from fn stops reading and is returned, except stop_reading(), which stops and returns OK.
// `stats` may be null; it is added to, not reset.
absl::Status for_each_document(const CorpusManifest& manifest, const CorpusSource& source,
                               const ReadOptions& options,
                               const std::function<absl::Status(const std::string& doc)>& fn,
                               ReadStats* stats);

// Same for one file in a given format (tests, tools).
absl::Status for_each_document_in_file(const std::string& path, const std::string& format,
                                       const std::string& text_field, const ReadOptions& options,
                                       const std::function<absl::Status(const std::string& doc)>& fn,
                                       ReadStats* stats);

// Return this from the callback to stop reading early without an error.
absl::Status stop_reading();

// NFC normalisation (ICU). Invalid UTF-8 sequences become U+FFFD.
std::string nfc(std::string_view utf8);

// Python's str.capitalize() (3.8+), as lm-evaluation-harness's task utils call it: the first code
// point in its full title-case mapping (ß -> Ss, ǆ -> ǅ), the rest lower-cased in full with their
// context (a word-final Greek sigma becomes ς), from ICU's root-locale case data. Invalid UTF-8
// sequences become U+FFFD.
std::string python_capitalize(std::string_view utf8);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF);
// otherwise `bad_offset` (if given) is the byte offset of the first bad sequence.
bool is_valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

// Number of code points in valid UTF-8 (counts non-continuation bytes).
int64_t count_code_points(std::string_view utf8);

}  // namespace lm::data
