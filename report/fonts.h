// The Bengali font of report.html. The report shows Bengali text (samples, fertility rows, the
// config's sources); a machine with no Bengali font draws it as empty boxes, so a report that
// holds Bengali embeds Lohit Bengali (report/fonts/, SIL Open Font License 1.1, 131 KB; ~175 KB
// as base64) as an @font-face, and a report without Bengali stays small.
#pragma once

#include <string>
#include <string_view>

namespace lm::report {

// The CSS family name of the embedded font (listed after the installed Bengali fonts).
inline constexpr const char* kEmbeddedBengaliFamily = "lmforge Lohit Bengali";

// The TTF's bytes, compiled in (report/CMakeLists.txt).
std::string_view bengali_font_ttf();

// Whether `utf8` holds a character of the Bengali block (U+0980..U+09FF).
bool has_bengali(std::string_view utf8);

// "@font-face{font-family:'lmforge Lohit Bengali';src:url(data:font/ttf;base64,...)...}" with the
// font's copyright and license in a CSS comment (the OFL asks each copy to carry them).
std::string bengali_font_face();

}  // namespace lm::report
