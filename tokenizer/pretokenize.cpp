#include "tokenizer/pretokenize.h"

#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <array>

namespace lm::tokenizer {
namespace {

// Character classes of one code point, as bits.
enum : uint8_t {
  kL = 1,       // \p{L}
  kN = 2,       // \p{N}
  kM = 4,       // \p{M}
  kWS = 8,      // \s: White_Space (Oniguruma's \s for Unicode text)
  kUpper = 16,  // \p{Lu} \p{Lt}
  kLower = 32,  // \p{Ll}
  kLmLo = 64,   // \p{Lm} \p{Lo}
  kCRLF = 128,  // \r \n
};
// GPT-4o's two letter classes: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}].
constexpr uint8_t kCaseUpper = kUpper | kLmLo | kM;
constexpr uint8_t kCaseLower = kLower | kLmLo | kM;

uint8_t classify_slow(UChar32 c) {
  const uint32_t gc = U_GET_GC_MASK(c);
  uint8_t f = 0;
  if (gc & U_GC_L_MASK) f |= kL;
  if (gc & (U_GC_LU_MASK | U_GC_LT_MASK)) f |= kUpper;
  if (gc & U_GC_LL_MASK) f |= kLower;
  if (gc & (U_GC_LM_MASK | U_GC_LO_MASK)) f |= kLmLo;
  if (gc & U_GC_N_MASK) f |= kN;
  if (gc & U_GC_M_MASK) f |= kM;
  if (u_isUWhiteSpace(c)) f |= kWS;
  if (c == '\r' || c == '\n') f |= kCRLF;
  return f;
}

const std::array<uint8_t, 128>& ascii_table() {
  static const std::array<uint8_t, 128> t = [] {
    std::array<uint8_t, 128> a{};
    for (int c = 0; c < 128; ++c) a[c] = classify_slow(c);
    return a;
  }();
  return t;
}

// The text decoded once: per code point its value, classes and byte offset (offset[n] = size).
struct Decoded {
  std::vector<UChar32> cp;
  std::vector<uint8_t> fl;
  std::vector<uint32_t> off;
  size_t n = 0;
  uint8_t f(size_t i) const { return i < n ? fl[i] : 0; }
  UChar32 lower_ascii(size_t i) const { return i < n && cp[i] >= 'A' && cp[i] <= 'Z' ? cp[i] + 32 : (i < n ? cp[i] : 0); }
};

void decode(std::string_view text, Decoded& d) {
  const auto& table = ascii_table();
  d.cp.clear();
  d.fl.clear();
  d.off.clear();
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t len = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < len;) {
    d.off.push_back(static_cast<uint32_t>(i));
    UChar32 c;
    if (s[i] < 0x80) {
      c = s[i++];
      d.fl.push_back(table[c]);
    } else {
      U8_NEXT(s, i, len, c);
      if (c < 0) c = 0xFFFD;  // invalid UTF-8: callers validate, this only keeps the split total
      d.fl.push_back(classify_slow(c));
    }
    d.cp.push_back(c);
  }
  d.n = d.cp.size();
  d.off.push_back(static_cast<uint32_t>(len));
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: the end of the match, or i.
size_t contraction(const Decoded& d, size_t i) {
  if (i >= d.n || d.cp[i] != '\'') return i;
  const UChar32 a = d.lower_ascii(i + 1), b = d.lower_ascii(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return i;
}

size_t run_of(const Decoded& d, size_t i, uint8_t any_of) {
  while (i < d.n && (d.fl[i] & any_of)) ++i;
  return i;
}

// ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with '/' in the tail for GPT-4o; `letters` kL, or kL | kM for
// the patterns that keep marks in words): the end, or i.
size_t punctuation(const Decoded& d, size_t i, bool slash_tail, uint8_t letters = kL) {
  const uint8_t stop = kWS | letters | kN;
  size_t p = i;
  if (d.cp[i] == ' ' && p + 1 < d.n && !(d.f(p + 1) & stop)) ++p;
  if (d.f(p) & stop) return i;
  size_t j = p;
  while (j < d.n && !(d.fl[j] & stop)) ++j;
  while (j < d.n && ((d.fl[j] & kCRLF) || (slash_tail && d.cp[j] == '/'))) ++j;
  return j;
}

// `\s*[\r\n]+|\s+(?!\S)|\s+` at a white-space code point i.
size_t whitespace(const Decoded& d, size_t i) {
  size_t j = i, last_newline = d.n;
  for (; j < d.n && (d.fl[j] & kWS); ++j)
    if (d.fl[j] & kCRLF) last_newline = j;
  if (last_newline != d.n) return last_newline + 1;  // \s* backs off to the last newline of the run
  if (j == d.n || j - i == 1) return j;              // (?!\S) holds at the end; else \s+ alone
  return j - 1;                                      // leaves one space to prefix the next word
}

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1); with `letters` kL | kM, llama3-marks and qwen35
// (whose optional prefix `[^\r\n\p{L}\p{N}]?` may be a mark: the run then ends where it would
// have without the prefix).
size_t match_llama3(const Decoded& d, size_t i, size_t max_digits, uint8_t letters) {
  if (size_t e = contraction(d, i); e != i) return e;
  const uint8_t f = d.fl[i];
  if (!(f & (kCRLF | kL | kN)) && (d.f(i + 1) & letters)) return run_of(d, i + 1, letters);
  if (f & letters) return run_of(d, i, letters);
  if (f & kN) {
    size_t j = i;
    while (j < d.n && j - i < max_digits && (d.fl[j] & kN)) ++j;
    return j;
  }
  if (size_t e = punctuation(d, i, false, letters); e != i) return e;
  if (f & kWS) return whitespace(d, i);
  return i + 1;  // unreachable: every code point is a letter, digit, space or other
}

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ from p: greedy upper run, then backs
// off until a lower-class code point starts the second run. The end, or p when it fails.
size_t gpt4o_lower_word(const Decoded& d, size_t p) {
  const size_t k = run_of(d, p, kCaseUpper);
  for (size_t q = k + 1; q-- > p;)
    if (d.f(q) & kCaseLower) return run_of(d, q, kCaseLower);
  return p;
}

size_t match_gpt4o(const Decoded& d, size_t i) {
  const uint8_t f = d.fl[i];
  const bool prefix = !(f & (kCRLF | kL | kN)) && i + 1 < d.n;
  // Alternative 1 with and then without the optional prefix, then alternative 2 the same way.
  for (size_t p : {prefix ? i + 1 : i, i}) {
    if (size_t e = gpt4o_lower_word(d, p); e != p) return contraction(d, e);
    if (!prefix) break;
  }
  for (size_t p : {prefix ? i + 1 : i, i}) {
    if (size_t k = run_of(d, p, kCaseUpper); k != p) return contraction(d, run_of(d, k, kCaseLower));
    if (!prefix) break;
  }
  if (f & kN) {
    size_t j = i;
    while (j < d.n && j - i < 3 && (d.fl[j] & kN)) ++j;
    return j;
  }
  if (size_t e = punctuation(d, i, true); e != i) return e;
  if (f & kWS) return whitespace(d, i);
  return i + 1;
}

void split_regex(const icu::RegexPattern& pattern, std::string_view text, std::vector<Span>* out) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  // UTF-16 index -> byte offset.
  std::vector<uint32_t> byte_at(u.length() + 1, 0);
  uint32_t bytes = 0;
  for (int32_t i = 0; i < u.length();) {
    const UChar32 c = u.char32At(i);
    const int32_t units = U16_LENGTH(c);
    for (int32_t k = 0; k < units; ++k) byte_at[i + k] = bytes;
    bytes += U8_LENGTH(c);
    i += units;
  }
  byte_at[u.length()] = bytes;
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(pattern.matcher(u, status));
  uint32_t last = 0;
  while (U_SUCCESS(status) && m->find(status)) {
    const uint32_t b = byte_at[m->start(status)], e = byte_at[m->end(status)];
    if (b == e) continue;  // empty matches make no piece
    if (b > last) out->push_back({last, b});
    out->push_back({b, e});
    last = e;
  }
  if (last < bytes) out->push_back({last, bytes});
}

}  // namespace

absl::StatusOr<Splitter> Splitter::make_regex(const std::string& pattern, const std::string& where) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError pe;
  std::shared_ptr<icu::RegexPattern> re(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, pe, status));
  if (U_FAILURE(status))
    return absl::InvalidArgumentError(absl::StrCat(where, ": the Split regex does not compile (", u_errorName(status),
                                                   " at offset ", pe.offset, "); check the tokenizer.json"));
  Splitter s;
  s.kind_ = Kind::kRegex;
  s.pattern_ = pattern;
  s.regex_ = std::move(re);
  return s;
}

absl::StatusOr<Splitter> Splitter::make(const std::string& pattern, const std::string& where) {
  Splitter s;
  s.pattern_ = pattern;
  if (pattern == kLlama3Pattern) s.kind_ = Kind::kLlama3;
  else if (pattern == kQwen2Pattern) s.kind_ = Kind::kQwen2;
  else if (pattern == kGpt4oPattern) s.kind_ = Kind::kGpt4o;
  else if (pattern == kLlama3MarksPattern) s.kind_ = Kind::kLlama3Marks;
  else if (pattern == kQwen35Pattern) s.kind_ = Kind::kQwen35;
  else return make_regex(pattern, where);
  return s;
}

void Splitter::split(std::string_view text, std::vector<Span>* out) const {
  if (text.empty()) return;
  if (kind_ == Kind::kRegex) {
    split_regex(*static_cast<const icu::RegexPattern*>(regex_.get()), text, out);
    return;
  }
  thread_local Decoded d;
  decode(text, d);
  const bool marks = kind_ == Kind::kLlama3Marks || kind_ == Kind::kQwen35;
  const size_t max_digits = kind_ == Kind::kLlama3 || kind_ == Kind::kLlama3Marks ? 3 : 1;
  const uint8_t letters = marks ? (kL | kM) : kL;
  for (size_t i = 0; i < d.n;) {
    size_t e = kind_ == Kind::kGpt4o ? match_gpt4o(d, i) : match_llama3(d, i, max_digits, letters);
    if (e <= i) e = i + 1;
    out->push_back({d.off[i], d.off[e]});
    i = e;
  }
}

}  // namespace lm::tokenizer
