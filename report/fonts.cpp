#include "report/fonts.h"

#include <cstddef>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace lm::report {

extern const unsigned char kBengaliFontTtf[];
extern const std::size_t kBengaliFontTtfSize;

std::string_view bengali_font_ttf() {
  return {reinterpret_cast<const char*>(kBengaliFontTtf), kBengaliFontTtfSize};
}

bool has_bengali(std::string_view s) {
  // U+0980..U+09FF is E0 A6 80..E0 A7 BF in UTF-8.
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) == 0xE0 &&
        (static_cast<unsigned char>(s[i + 1]) == 0xA6 || static_cast<unsigned char>(s[i + 1]) == 0xA7))
      return true;
  return false;
}

std::string bengali_font_face() {
  // unicode-range: the font is used for Bengali (its block, the danda and double danda U+0964-0965
  // that end Bengali sentences from the Devanagari block, and the joiners and dotted circle its
  // shaping uses) only; Latin text keeps the page's own fonts.
  return absl::StrCat(
      "/* Lohit Bengali 2.91.5: Copyright 2006 Modular Infotech Pvt Ltd, 2009 Red Hat, Inc. Licensed under the SIL "
      "Open Font License 1.1 (https://openfontlicense.org; lmforge: report/fonts/OFL.txt). */\n"
      "@font-face{font-family:'",
      kEmbeddedBengaliFamily, "';src:url(data:font/ttf;base64,", absl::Base64Escape(absl::string_view(bengali_font_ttf().data(), bengali_font_ttf().size())),
      ") format('truetype');unicode-range:U+0964-0965,U+0980-09FF,U+200C-200D,U+25CC;font-display:swap}\n");
}

}  // namespace lm::report
