// Normalisation of the tokenizer: Unicode NFC plus two Bengali fixes, compiled into the
// SentencePiece model as a rule table (normalization_rule_tsv) instead of `nmt_nfkc`, which
// maps ZWNJ (U+200C) to a space and applies compatibility folds that damage Bengali text.
//   ত + ্ + ZWJ (U+09A4 U+09CD U+200D) -> ৎ (U+09CE)   old encoding of khanda ta
//   ৷ (U+09F7, currency numerator four)  -> । (U+0964)   look-alike used as a danda
#pragma once

#include <string>
#include <string_view>

namespace lm::tokenizer {

// The rule table in SentencePiece's TSV format ("src hex code points<TAB>target hex code points"):
// every code point whose NFC differs maps to its NFC, every canonical decomposition maps to its
// composition, plus the Bengali fixes. Longest match, no canonical reordering: the corpus
// readers already NFC-normalise with ICU, the table makes spm.model carry the same rule.
std::string nfc_rule_tsv();

// The text the tokenizer should give back: ICU NFC followed by the Bengali fixes. Round-trip
// exactness is measured against it.
std::string canonical(std::string_view utf8);

// ICU's version string ("72.1"), recorded in reports.
std::string icu_version();

}  // namespace lm::tokenizer
