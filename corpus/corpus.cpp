#include "corpus/corpus.h"

#include <glob.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <set>
#include <unordered_set>

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "corpus/decompress.h"
#include "corpus/parquet.h"

namespace lm::data {
namespace {

constexpr const char* kStopMessage = "lm::data::stop_reading";

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string join(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || dir.empty()) return p;
  return dir + "/" + p;
}

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> expand(const std::string& pattern) {
  std::vector<std::string> out;
  if (!has_glob_chars(pattern)) {
    if (file_exists(pattern)) out.push_back(pattern);
    return out;
  }
  glob_t g;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i)
      if (file_exists(g.gl_pathv[i])) out.push_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

// Bytes of the Unicode space at s[i] (White_Space beyond ASCII, the zero-width space and the BOM),
// 0 for anything else: a line of only U+00A0 or U+3000 is no document (issue 40).
size_t unicode_space_bytes(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (b(0) == 0xC2 && (b(1) == 0xA0 || b(1) == 0x85)) return 2;                  // NBSP, NEL
  if (b(0) == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;                      // U+1680
  if (b(0) == 0xE2 && b(1) == 0x80 && ((b(2) >= 0x80 && b(2) <= 0x8B) || b(2) == 0xA8 || b(2) == 0xA9 || b(2) == 0xAF))
    return 3;                                                                     // U+2000-200B, 2028, 2029, 202F
  if (b(0) == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;                      // U+205F
  if (b(0) == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;                      // U+3000 ideographic space
  if (b(0) == 0xEF && b(1) == 0xBB && b(2) == 0xBF) return 3;                      // U+FEFF
  return 0;
}

bool is_blank(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    const size_t n = unicode_space_bytes(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Reads a file line by line, decompressed by its magic bytes (corpus/decompress.h); lines of any length.
class LineReader {
 public:
  explicit LineReader(std::unique_ptr<ByteStream> in) : in_(std::move(in)) {}
  // Sets `line` (without '\n' or a trailing '\r'); false at end of file or on error.
  bool next(std::string& line) {
    line.clear();
    bool partial = false;  // bytes of an unterminated last line seen
    while (true) {
      if (pos_ == len_) {
        if (eof_) break;
        const int64_t n = in_->read(buf_, sizeof(buf_));
        if (n < 0) {
          error_ = in_->error();
          return false;
        }
        if (n == 0) {
          eof_ = true;
          break;
        }
        pos_ = 0;
        len_ = static_cast<size_t>(n);
      }
      const char* start = buf_ + pos_;
      const void* nl = memchr(start, '\n', len_ - pos_);
      if (nl) {
        size_t k = static_cast<const char*>(nl) - start;
        line.append(start, k);
        pos_ += k + 1;
        partial = true;
        break;
      }
      line.append(start, len_ - pos_);
      pos_ = len_;
      partial = true;
      if (line.size() > kMaxDocumentBytes) {  // one line without a newline must not grow without bound
        too_long_ = true;
        ++line_no_;
        return false;
      }
    }
    if (eof_ && !partial) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++line_no_;
    return true;
  }
  int64_t line_no() const { return line_no_; }
  const std::string& error() const { return error_; }
  bool too_long() const { return too_long_; }  // stopped at a line over kMaxDocumentBytes
  const std::string& format() const { return in_->format(); }

 private:
  std::unique_ptr<ByteStream> in_;
  char buf_[1 << 16];
  size_t pos_ = 0, len_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0;
  std::string error_;
  bool too_long_ = false;
};

absl::Status too_long_error(const std::string& where) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: a document longer than %d MiB (a line without a line break?); documents are capped at that so that "
      "reading a corpus takes bounded memory: split the text into lines or paragraphs",
      where, kMaxDocumentBytes >> 20));
}

const icu::Normalizer2* nfc_instance() {
  static const icu::Normalizer2* n = [] {
    UErrorCode err = U_ZERO_ERROR;
    return icu::Normalizer2::getNFCInstance(err);
  }();
  return n;
}

}  // namespace

void ReadStats::add(const ReadStats& o) {
  documents += o.documents;
  bytes += o.bytes;
  chars += o.chars;
  invalid_skipped += o.invalid_skipped;
  empty_dropped += o.empty_dropped;
  duplicates_dropped += o.duplicates_dropped;
  nulls_skipped += o.nulls_skipped;
}

absl::Status stop_reading() { return absl::CancelledError(kStopMessage); }

std::string nfc(std::string_view utf8) {
  const icu::Normalizer2* n = nfc_instance();
  UErrorCode err = U_ZERO_ERROR;
  icu::StringPiece sp(utf8.data(), static_cast<int32_t>(utf8.size()));
  if (is_valid_utf8(utf8) && n->isNormalizedUTF8(sp, err) && U_SUCCESS(err)) return std::string(utf8);
  err = U_ZERO_ERROR;
  std::string out;
  out.reserve(utf8.size());
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, sp, sink, nullptr, err);
  if (U_FAILURE(err)) {
    // Fall back through UTF-16 (replaces ill-formed sequences with U+FFFD).
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(sp);
    err = U_ZERO_ERROR;
    icu::UnicodeString v = n->normalize(u, err);
    out.clear();
    v.toUTF8String(out);
  }
  return out;
}

std::string python_capitalize(std::string_view utf8) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  if (u.isEmpty()) return std::string();
  const icu::Locale& root = icu::Locale::getRoot();
  const int32_t n_first = U16_LENGTH(u.char32At(0));
  icu::UnicodeString first(u, 0, n_first);
  // The rest lower-cased in the context of the whole string (CPython lowers each character with
  // the whole string around it: the final-sigma rule looks back past the first character).
  icu::UnicodeString lower_all(u), lower_first(first), rest;
  lower_all.toLower(root);
  lower_first.toLower(root);
  if (lower_all.startsWith(lower_first)) {
    rest.setTo(lower_all, lower_first.length());
  } else {
    rest.setTo(u, n_first);
    rest.toLower(root);
  }
  first.toTitle(nullptr, root, U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT | U_TITLECASE_NO_LOWERCASE);
  std::string out;
  (first + rest).toUTF8String(out);
  return out;
}

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    if (i + len > n) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        if (bad_offset) *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

int64_t count_code_points(std::string_view utf8) {
  int64_t n = 0;
  for (unsigned char c : utf8) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

bool is_id(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// "bn/news.txt.gz" -> "news"; empty when that is not an id (a glob, a dotfile).
std::string path_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string stem = base.substr(0, base.find('.'));
  return is_id(stem) ? stem : "";
}

}  // namespace

std::string source_id(const CorpusManifest& m, size_t i) {
  const CorpusSource& s = m.sources[i];
  if (!s.name.empty()) return s.name;
  const std::string stem = s.paths.empty() ? "" : path_stem(s.paths[0]);
  bool unique = !stem.empty();
  for (size_t k = 0; k < m.sources.size() && unique; ++k) {
    const CorpusSource& o = m.sources[k];
    if (k != i && (o.name == stem || (o.name.empty() && !o.paths.empty() && path_stem(o.paths[0]) == stem)))
      unique = false;
  }
  if (unique) return stem;
  int nth = 0;
  for (size_t k = 0; k <= i; ++k) nth += m.sources[k].lang == s.lang;
  return absl::StrCat(s.lang, "-", nth);
}

std::string describe_source(const CorpusManifest& m, size_t i) {
  const CorpusSource& s = m.sources[i];
  return absl::StrCat("'", source_id(m, i), "' (sources[", i, "], ", s.lang,
                      s.paths.empty() ? "" : ", " + s.paths[0], s.paths.size() > 1 ? ", ..." : "", ")");
}

absl::Status validate_manifest(const CorpusManifest& m, const std::string& where) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, ": ", what));
  };
  if (m.sources.empty()) return bad("sources", "no sources (add at least one {\"paths\": [...], \"lang\": ...})");
  for (size_t i = 0; i < m.sources.size(); ++i) {
    const CorpusSource& s = m.sources[i];
    const std::string p = absl::StrCat("sources[", i, "]");
    if (s.lang.empty()) return bad(p + ".lang", "required (a language tag such as \"bn\" or \"en\")");
    if (s.format != "lines" && s.format != "paragraphs" && s.format != "jsonl")
      return bad(p + ".format", "expected \"lines\", \"paragraphs\" or \"jsonl\", got \"" + s.format + "\"");
    if (s.format == "jsonl" && s.text_field.empty()) return bad(p + ".text_field", "must not be empty");
    if (s.column.empty()) return bad(p + ".column", "must not be empty (the string column of Parquet files)");
    if (!(s.weight > 0) || !std::isfinite(s.weight))
      return bad(p + ".weight", absl::StrCat("must be a positive number, got ", s.weight));
    if (s.paths.empty()) return bad(p + ".paths", "no files listed");
    if (!s.name.empty() && !is_id(s.name))
      return bad(p + ".name", "'" + s.name + "': use 1-64 letters, digits, '_' or '-' (it names shard files)");
    for (size_t k = 0; k < i; ++k) {
      if (source_id(m, k) == source_id(m, i))
        return bad(p + ".name", absl::StrCat("'", source_id(m, i), "' is also the id of sources[", k,
                                             "] (give each source its own name)"));
    }
    for (size_t k = 0; k < s.paths.size(); ++k) {
      const std::string full = join(m.base_dir, s.paths[k]);
      if (expand(full).empty())
        return absl::NotFoundError(absl::StrCat(where, ": ", p, ".paths[", k, "]: no file matches '", full,
                                                "' (paths are relative to the manifest's folder)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CorpusManifest> load_manifest(const std::string& path) {
  LM_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  CorpusManifest m;
  LM_RETURN_IF_ERROR(annotate(from_json(j, m), path));
  const size_t slash = path.find_last_of('/');
  m.base_dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  LM_RETURN_IF_ERROR(validate_manifest(m, path));
  return m;
}

std::vector<std::string> resolve_paths(const CorpusManifest& m, const CorpusSource& s) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& p : s.paths)
    for (auto& f : expand(join(m.base_dir, p)))
      if (seen.insert(f).second) out.push_back(std::move(f));
  return out;
}

namespace {

bool is_stop(const absl::Status& s) { return absl::IsCancelled(s) && s.message() == kStopMessage; }

// Where the documents of one file go: empty ones dropped, NFC, optional dedup (`seen` spans the
// files of a source), counted in `st`, then handed to fn.
struct DocSink {
  const ReadOptions& options;
  const std::function<absl::Status(const std::string& doc)>& fn;
  ReadStats& st;
  std::unordered_set<uint64_t>& seen;

  absl::Status emit(std::string_view raw) {
    if (is_blank(raw)) {
      ++st.empty_dropped;
      return absl::OkStatus();
    }
    std::string doc = nfc(raw);
    if (options.dedup && !seen.insert(fnv1a64(doc.data(), doc.size())).second) {
      ++st.duplicates_dropped;
      return absl::OkStatus();
    }
    ++st.documents;
    st.bytes += static_cast<int64_t>(doc.size());
    st.chars += count_code_points(doc);
    return fn(doc);
  }
  // OK with *skip set for invalid UTF-8 under skip_invalid_utf8; else an error naming where()
  // (built only then: this runs for every line) and the `unit` ("line", "value") that is skipped.
  template <class Where>
  absl::Status check_utf8(std::string_view text, const Where& where, const char* unit, bool* skip) {
    size_t bad = 0;
    *skip = false;
    if (is_valid_utf8(text, &bad)) return absl::OkStatus();
    if (options.skip_invalid_utf8) {
      ++st.invalid_skipped;
      *skip = true;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": invalid UTF-8 at byte ", bad, " of the ", unit, " (fix the file, or pass --skip-invalid-utf8 to skip and count such ",
        unit, "s)"));
  }
};

// One JSON line (line `line_no` of `path`): the string field `text_field` of an object.
absl::Status emit_jsonl(const std::string& line, const std::string& path, int64_t line_no,
                        const std::string& text_field, DocSink& sink) {
  auto where = [&] { return absl::StrCat(path, ":", line_no); };
  Json j;
  try {
    j = Json::parse(line);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    return absl::InvalidArgumentError(absl::StrCat(where(), ": not valid JSON: ", e.what()));
  }
  auto it = j.is_object() ? j.find(text_field) : j.end();
  if (!j.is_object() || it == j.end() || !it->is_string())
    return absl::InvalidArgumentError(absl::StrCat(where(), ": expected an object with a string field \"", text_field,
                                                   "\" (set the source's text_field)"));
  return sink.emit(it->get_ref<const std::string&>());
}

// A text file (plain or compressed) in one of the line formats.
absl::Status read_text_file_docs(const std::string& path, const CorpusSource& src, DocSink& sink) {
  LM_ASSIGN_OR_RETURN(auto stream, ByteStream::open(path));
  LineReader reader(std::move(stream));
  absl::Status status;
  std::string line, para;
  bool in_para = false;
  while (status.ok() && reader.next(line)) {
    auto where = [&] { return absl::StrCat(path, ":", reader.line_no()); };
    bool skip = false;
    status = sink.check_utf8(line, where, "line", &skip);
    if (!status.ok() || skip) continue;
    if (src.format == "lines") {
      status = sink.emit(line);
    } else if (src.format == "paragraphs") {
      if (is_blank(line)) {
        if (in_para) status = sink.emit(para);
        para.clear();
        in_para = false;
      } else if (para.size() + line.size() >= kMaxDocumentBytes) {
        status = too_long_error(where());
      } else {
        if (in_para) para += '\n';
        para += line;
        in_para = true;
      }
    } else if (!is_blank(line)) {
      status = emit_jsonl(line, path, reader.line_no(), src.text_field, sink);
    }
  }
  if (status.ok() && in_para) status = sink.emit(para);
  if (status.ok() && reader.too_long()) status = too_long_error(absl::StrCat(path, ":", reader.line_no()));
  if (status.ok() && !reader.error().empty())
    status = absl::DataLossError(absl::StrCat(path, ":", reader.line_no() + 1, ": cannot read (", reader.format(),
                                              "): ", reader.error(), " (corrupt or truncated file?)"));
  return status;
}

// A Parquet file (corpus/parquet.h): every non-null value of the source's column is a document,
// whatever its `format`; the nulls are counted, skipped and said.
absl::Status read_parquet_docs(const std::string& path, const CorpusSource& src, DocSink& sink) {
  auto counts = for_each_parquet_value(path, src.column, [&](std::string_view value, int64_t row) {
    bool skip = false;
    auto where = [&] { return absl::StrCat(path, ": row ", row, " of column '", src.column, "'"); };
    LM_RETURN_IF_ERROR(sink.check_utf8(value, where, "value", &skip));
    return skip ? absl::OkStatus() : sink.emit(value);
  });
  if (!counts.ok()) return counts.status();
  sink.st.nulls_skipped += counts->nulls;
  if (counts->nulls > 0)
    log_info("%s: skipped %d null values of column '%s' (of %d rows)", path, counts->nulls, src.column, counts->rows);
  return absl::OkStatus();
}

// One file of a source, Parquet or text by its first bytes.
absl::Status read_one_file(const std::string& path, const CorpusSource& src, DocSink& sink) {
  if (src.format != "lines" && src.format != "paragraphs" && src.format != "jsonl")
    return absl::InvalidArgumentError(absl::StrCat(path, ": unknown format '", src.format, "'"));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  char head[4] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  if (is_parquet(std::string_view(head, n))) return read_parquet_docs(path, src, sink);
  return read_text_file_docs(path, src, sink);
}

}  // namespace

absl::Status for_each_document_in_file(const std::string& path, const std::string& format,
                                       const std::string& text_field, const ReadOptions& options,
                                       const std::function<absl::Status(const std::string& doc)>& fn,
                                       ReadStats* stats) {
  ReadStats local;
  std::unordered_set<uint64_t> seen;
  CorpusSource src;
  src.format = format;
  src.text_field = text_field;
  DocSink sink{options, fn, stats ? *stats : local, seen};
  absl::Status st = read_one_file(path, src, sink);
  return is_stop(st) ? absl::OkStatus() : st;
}

absl::Status for_each_document(const CorpusManifest& m, const CorpusSource& s, const ReadOptions& options,
                               const std::function<absl::Status(const std::string& doc)>& fn,
                               ReadStats* stats) {
  std::vector<std::string> files = resolve_paths(m, s);
  if (files.empty())
    return absl::NotFoundError(absl::StrCat("corpus source '", s.lang, "': no file matches its paths (base folder '",
                                            m.base_dir, "')"));
  ReadStats local;
  std::unordered_set<uint64_t> seen;
  DocSink sink{options, fn, stats ? *stats : local, seen};
  for (const auto& f : files) {
    absl::Status st = read_one_file(f, s, sink);
    if (is_stop(st)) return absl::OkStatus();
    LM_RETURN_IF_ERROR(st);
  }
  return absl::OkStatus();
}

}  // namespace lm::data
