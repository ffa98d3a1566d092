#include "report/plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"

namespace lm::report {
namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};

std::string color_of(const Series& s, size_t i) {
  return s.color.empty() ? kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))] : s.color;
}

struct Range {
  double lo = 0, hi = 1;
};

// Axis range over all finite values, padded so flat series still get an axis.
Range range_of(const Plot& p, bool x) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : p.series)
    for (double v : x ? s.x : s.y)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) return {0, 1};
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double d = std::max(std::fabs(hi) * 0.05, 1e-9);
    lo -= d, hi += d;
  }
  if (!x) {
    const double pad = (hi - lo) * 0.05;
    lo -= pad, hi += pad;
  }
  return {lo, hi};
}

// "Nice" ticks: step 1, 2 or 5 x 10^k giving about `n` intervals (Heckbert, Graphics Gems 1990).
std::vector<double> ticks(Range r, int n = 5) {
  const double raw = (r.hi - r.lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  std::vector<double> t;
  for (double v = std::ceil(r.lo / step) * step; v <= r.hi + step * 1e-9; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

std::string tick_label(double v) {
  const double a = std::fabs(v);
  auto trim = [](std::string s) {
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s;
  };
  if (a >= 1e9) return trim(absl::StrFormat("%.2f", v / 1e9)) + "G";
  if (a >= 1e6) return trim(absl::StrFormat("%.2f", v / 1e6)) + "M";
  if (a >= 1e4) return trim(absl::StrFormat("%.1f", v / 1e3)) + "k";
  if (a == 0) return "0";
  if (a < 1e-3) return absl::StrFormat("%.0e", v);
  if (a < 1) return trim(absl::StrFormat("%.4f", v));
  return trim(absl::StrFormat("%.2f", v));
}

struct Frame {
  int w, h, left = 70, right = 16, top = 30, bottom = 44;
  Range xr, yr;
  double px(double x) const { return left + (x - xr.lo) / (xr.hi - xr.lo) * (w - left - right); }
  double py(double y) const { return h - bottom - (y - yr.lo) / (yr.hi - yr.lo) * (h - top - bottom); }
};

// 5x7 glyphs, rows top to bottom; upper case is drawn as lower case.
const std::map<char, std::vector<const char*>>& font() {
  static const std::map<char, std::vector<const char*>> f = {
      {'0', {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "}},
      {'1', {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "}},
      {'2', {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"}},
      {'3', {"#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "}},
      {'4', {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "}},
      {'5', {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "}},
      {'6', {"  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "}},
      {'7', {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "}},
      {'8', {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "}},
      {'9', {" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "}},
      {'.', {"     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "}},
      {',', {"     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "}},
      {'-', {"     ", "     ", "     ", "#####", "     ", "     ", "     "}},
      {'+', {"     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "}},
      {'%', {"##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"}},
      {'/', {"     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "}},
      {'(', {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "}},
      {')', {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "}},
      {':', {"     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "}},
      {'_', {"     ", "     ", "     ", "     ", "     ", "     ", "#####"}},
      {'=', {"     ", "     ", "#####", "     ", "#####", "     ", "     "}},
      {'a', {"     ", "     ", " ### ", "    #", " ####", "#   #", " ####"}},
      {'b', {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#### "}},
      {'c', {"     ", "     ", " ### ", "#    ", "#    ", "#   #", " ### "}},
      {'d', {"    #", "    #", " ## #", "#  ##", "#   #", "#   #", " ####"}},
      {'e', {"     ", "     ", " ### ", "#   #", "#####", "#    ", " ### "}},
      {'f', {"  ## ", " #  #", " #   ", "###  ", " #   ", " #   ", " #   "}},
      {'g', {"     ", " ####", "#   #", "#   #", " ####", "    #", " ### "}},
      {'h', {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#   #"}},
      {'i', {"  #  ", "     ", " ##  ", "  #  ", "  #  ", "  #  ", " ### "}},
      {'j', {"   # ", "     ", "  ## ", "   # ", "   # ", "#  # ", " ##  "}},
      {'k', {"#    ", "#    ", "#  # ", "# #  ", "##   ", "# #  ", "#  # "}},
      {'l', {" ##  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "}},
      {'m', {"     ", "     ", "## # ", "# # #", "# # #", "#   #", "#   #"}},
      {'n', {"     ", "     ", "# ## ", "##  #", "#   #", "#   #", "#   #"}},
      {'o', {"     ", "     ", " ### ", "#   #", "#   #", "#   #", " ### "}},
      {'p', {"     ", "     ", "#### ", "#   #", "#### ", "#    ", "#    "}},
      {'q', {"     ", "     ", " ## #", "#  ##", " ####", "    #", "    #"}},
      {'r', {"     ", "     ", "# ## ", "##  #", "#    ", "#    ", "#    "}},
      {'s', {"     ", "     ", " ####", "#    ", " ### ", "    #", "#### "}},
      {'t', {" #   ", " #   ", "###  ", " #   ", " #   ", " #  #", "  ## "}},
      {'u', {"     ", "     ", "#   #", "#   #", "#   #", "#  ##", " ## #"}},
      {'v', {"     ", "     ", "#   #", "#   #", "#   #", " # # ", "  #  "}},
      {'w', {"     ", "     ", "#   #", "#   #", "# # #", "# # #", " # # "}},
      {'x', {"     ", "     ", "#   #", " # # ", "  #  ", " # # ", "#   #"}},
      {'y', {"     ", "     ", "#   #", "#   #", " ####", "    #", " ### "}},
      {'z', {"     ", "     ", "#####", "   # ", "  #  ", " #   ", "#####"}},
  };
  return f;
}

struct Canvas {
  int w, h;
  std::vector<uint8_t> rgb;
  Canvas(int w_, int h_) : w(w_), h(h_), rgb(3 * w_ * h_, 255) {}
  void set(int x, int y, uint32_t c) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    uint8_t* p = &rgb[3 * (y * w + x)];
    p[0] = (c >> 16) & 255, p[1] = (c >> 8) & 255, p[2] = c & 255;
  }
  void dot(int x, int y, int r, uint32_t c) {
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx)
        if (dx * dx + dy * dy <= r * r + r) set(x + dx, y + dy, c);
  }
  // Bresenham with a round brush; `dash` > 0 draws `dash` pixels on, `dash` off.
  void line(double x0d, double y0d, double x1d, double y1d, int r, uint32_t c, int dash = 0) {
    int x0 = std::lround(x0d), y0 = std::lround(y0d), x1 = std::lround(x1d), y1 = std::lround(y1d);
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy, n = 0;
    while (true) {
      if (dash == 0 || (n / dash) % 2 == 0) r > 0 ? dot(x0, y0, r, c) : set(x0, y0, c);
      ++n;
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  // Text at (x, y) = top-left, scale s; returns the width drawn.
  int text(int x, int y, const std::string& s, int scale, uint32_t c) {
    int cx = x;
    for (char ch : s) {
      const char lc = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      auto it = font().find(lc);
      if (it != font().end()) {
        for (int row = 0; row < 7; ++row)
          for (int col = 0; col < 5; ++col)
            if (it->second[row][col] == '#')
              for (int a = 0; a < scale; ++a)
                for (int b = 0; b < scale; ++b) set(cx + col * scale + b, y + row * scale + a, c);
      }
      cx += 6 * scale;
    }
    return cx - x;
  }
};

int text_width(const std::string& s, int scale) { return static_cast<int>(s.size()) * 6 * scale; }

uint32_t parse_color(const std::string& hex) {
  return hex.size() == 7 ? static_cast<uint32_t>(std::stoul(hex.substr(1), nullptr, 16)) : 0;
}

void put_u32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 255));
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  std::string td = std::string(type, 4) + data;
  out += td;
  put_u32(out, static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(td.data()), td.size())));
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string encode_png(const std::vector<uint8_t>& rgb, int w, int h) {
  // Each scanline: filter byte 0 (None) + w*3 bytes.
  std::string raw;
  raw.reserve(static_cast<size_t>(h) * (3 * w + 1));
  for (int y = 0; y < h; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(&rgb[3 * y * w]), 3 * w);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  compress2(reinterpret_cast<Bytef*>(&z[0]), &zlen, reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 9);
  z.resize(zlen);
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32(ihdr, w);
  put_u32(ihdr, h);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, adaptive filter, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", "");
  return out;
}

std::string plot_svg(const Plot& p, int w, int h) {
  Frame f{w, h};
  f.xr = range_of(p, true);
  f.yr = range_of(p, false);
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
      "font-family=\"'Noto Sans Bengali','Kalpurush','SolaimanLipi',sans-serif\" font-size=\"12\">\n"
      "<title>%s</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
      w, h, w, h, html_escape(p.title), w, h);
  s += absl::StrFormat("<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", f.left, html_escape(p.title));
  for (double t : ticks(f.yr)) {
    if (t < f.yr.lo || t > f.yr.hi) continue;
    s += absl::StrFormat("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
                         "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                         f.left, w - f.right, f.py(t), f.py(t), f.left - 6, f.py(t) + 4, tick_label(t));
  }
  for (double t : ticks(f.xr)) {
    if (t < f.xr.lo || t > f.xr.hi) continue;
    s += absl::StrFormat("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e5e5e5\"/>"
                         "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                         f.px(t), f.px(t), f.top, h - f.bottom, f.px(t), h - f.bottom + 16, tick_label(t));
  }
  s += absl::StrFormat("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
                       f.left, f.top, w - f.left - f.right, h - f.top - f.bottom);
  s += absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", (f.left + w - f.right) / 2, h - 8, html_escape(p.x_label));
  s += absl::StrFormat("<text transform=\"translate(14,%d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
                       (f.top + h - f.bottom) / 2, html_escape(p.y_label));
  std::string legend = absl::StrFormat("<rect x=\"%d\" y=\"%d\" width=\"150\" height=\"%d\" fill=\"#fff\" fill-opacity=\"0.85\"/>\n",
                                       w - f.right - 156, f.top + 2, 16 * static_cast<int>(p.series.size()) + 6);
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& se = p.series[i];
    std::string pts;
    for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k)
      if (std::isfinite(se.y[k])) pts += absl::StrFormat("%.1f,%.1f ", f.px(se.x[k]), f.py(se.y[k]));
    const std::string c = color_of(se, i);
    s += absl::StrFormat("<polyline class=\"series\" data-name=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n",
                         html_escape(se.name), c, se.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
    if (se.markers)
      for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k)
        s += absl::StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", f.px(se.x[k]), f.py(se.y[k]), c);
    const int ly = f.top + 14 + 16 * static_cast<int>(i);
    legend += absl::StrFormat("<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                         "<text x=\"%d\" y=\"%d\">%s</text>\n",
                         w - f.right - 150, w - f.right - 128, ly - 4, ly - 4, c,
                         se.dashed ? " stroke-dasharray=\"6 4\"" : "", w - f.right - 122, ly, html_escape(se.name));
  }
  s += legend + "</svg>\n";
  return s;
}

std::string plot_png(const Plot& p, int w, int h) {
  // Text is the 5x7 font at `sc`x (2x up to 800 px wide, 3x at 1280): the frame margins and
  // strokes grow with it, so a PNG at twice the SVG's size reads like the SVG scaled up.
  const int sc = std::max(2, w / 400), r = sc / 2;
  Frame f{w, h, 50 * sc, 10 * sc, 20 * sc, 30 * sc};
  f.xr = range_of(p, true);
  f.yr = range_of(p, false);
  Canvas cv(w, h);
  const uint32_t grid = 0xe5e5e5, ink = 0x333333;
  for (double t : ticks(f.yr)) {
    if (t < f.yr.lo || t > f.yr.hi) continue;
    cv.line(f.left, f.py(t), w - f.right, f.py(t), 0, grid);
    const std::string l = tick_label(t);
    cv.text(f.left - 4 * sc - text_width(l, sc), static_cast<int>(f.py(t)) - 7 * sc / 2, l, sc, ink);
  }
  for (double t : ticks(f.xr)) {
    if (t < f.xr.lo || t > f.xr.hi) continue;
    cv.line(f.px(t), f.top, f.px(t), h - f.bottom, 0, grid);
    const std::string l = tick_label(t);
    cv.text(static_cast<int>(f.px(t)) - text_width(l, sc) / 2, h - f.bottom + 4 * sc, l, sc, ink);
  }
  cv.line(f.left, f.top, w - f.right, f.top, 0, ink);
  cv.line(f.left, h - f.bottom, w - f.right, h - f.bottom, 0, ink);
  cv.line(f.left, f.top, f.left, h - f.bottom, 0, ink);
  cv.line(w - f.right, f.top, w - f.right, h - f.bottom, 0, ink);
  cv.text(f.left, 5 * sc, p.title, sc, 0x000000);
  cv.text((f.left + w - f.right - text_width(p.x_label, sc)) / 2, h - 12 * sc, p.x_label, sc, ink);
  // y label: written horizontally above the axis (no rotated glyphs in the bitmap font).
  cv.text(std::max(4, w - f.right - text_width(p.y_label, sc)), 5 * sc, p.y_label, sc, 0x777777);
  int legend_w = 0;
  for (const auto& se : p.series) legend_w = std::max(legend_w, 20 * sc + text_width(se.name, sc));
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& se = p.series[i];
    const uint32_t c = parse_color(color_of(se, i));
    bool have = false;
    double lx = 0, ly = 0;
    for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k) {
      if (!std::isfinite(se.y[k])) continue;
      const double x = f.px(se.x[k]), y = f.py(se.y[k]);
      if (have) cv.line(lx, ly, x, y, r, c, se.dashed ? 3 * sc : 0);
      if (se.markers) cv.dot(std::lround(x), std::lround(y), 2 * sc, c);
      lx = x, ly = y, have = true;
    }
  }
  // Legend on a white box so curves never hide it.
  const int lxx = w - f.right - legend_w - 5 * sc, row = 11 * sc;
  for (int y = f.top + 2 * sc; y < f.top + 4 * sc + row * static_cast<int>(p.series.size()); ++y)
    for (int x = lxx - 6; x < w - f.right - 2; ++x) cv.set(x, y, 0xffffff);
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& se = p.series[i];
    const uint32_t c = parse_color(color_of(se, i));
    const int lyy = f.top + 8 * sc + row * static_cast<int>(i);
    cv.line(lxx, lyy, lxx + 14 * sc, lyy, r, c, se.dashed ? 3 * sc : 0);
    if (se.markers) cv.dot(lxx + 7 * sc, lyy, 2 * sc, c);
    cv.text(lxx + 18 * sc, lyy - 7 * sc / 2, se.name, sc, ink);
  }
  return encode_png(cv.rgb, w, h);
}

}  // namespace lm::report
