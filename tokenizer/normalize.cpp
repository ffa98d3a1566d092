#include "tokenizer/normalize.h"

#include <map>
#include <vector>

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/uversion.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "corpus/corpus.h"

namespace lm::tokenizer {
namespace {

std::vector<UChar32> code_points(const icu::UnicodeString& s) {
  std::vector<UChar32> out;
  for (int32_t i = 0; i < s.length();) {
    UChar32 c = s.char32At(i);
    out.push_back(c);
    i += U16_LENGTH(c);
  }
  return out;
}

std::string hex_list(const std::vector<UChar32>& cps) {
  std::string out;
  for (UChar32 c : cps) absl::StrAppendFormat(&out, "%s%04X", out.empty() ? "" : " ", c);
  return out;
}

}  // namespace

std::string nfc_rule_tsv() {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  std::map<std::vector<UChar32>, std::vector<UChar32>> rules;  // sorted: a stable file
  for (UChar32 c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    if (!u_isdefined(c)) continue;
    icu::UnicodeString s(c);
    err = U_ZERO_ERROR;
    icu::UnicodeString composed = nfc->normalize(s, err);
    if (U_FAILURE(err)) continue;
    if (composed != s) rules[{c}] = code_points(composed);
    err = U_ZERO_ERROR;
    icu::UnicodeString decomposed = nfd->normalize(s, err);
    if (U_SUCCESS(err) && decomposed != s && decomposed != composed && decomposed.countChar32() > 1)
      rules[code_points(decomposed)] = code_points(composed);
  }
  rules[{0x09A4, 0x09CD, 0x200D}] = {0x09CE};
  rules[{0x09F7}] = {0x0964};
  std::string out;
  for (const auto& [src, dst] : rules) absl::StrAppend(&out, hex_list(src), "\t", hex_list(dst), "\n");
  return out;
}

std::string canonical(std::string_view utf8) {
  std::string s = data::nfc(utf8);
  if (s.find("\xE0\xA7\xB7") != std::string::npos || s.find("\xE2\x80\x8D") != std::string::npos) {
    s = absl::StrReplaceAll(s, {{"\xE0\xA6\xA4\xE0\xA7\x8D\xE2\x80\x8D", "\xE0\xA7\x8E"},  // ত্‍ -> ৎ
                                {"\xE0\xA7\xB7", "\xE0\xA5\xA4"}});                      // ৷ -> ।
  }
  return s;
}

std::string icu_version() { return U_ICU_VERSION; }

}  // namespace lm::tokenizer
