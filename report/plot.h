// Line plots for the run report: the same Plot rendered as inline SVG (report.html) and as a PNG
// (README figures). The PNG path has no dependencies beyond zlib: a small RGB canvas, a 5x7
// bitmap font for ASCII labels, and a PNG encoder (deflate via zlib, CRC-32 per chunk; PNG spec
// RFC 2083).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lm::report {

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string color;  // "#rrggbb"; empty: a palette colour
  bool dashed = false;
  bool markers = false;  // dots at each point (sparse series such as validation loss)
};

struct Plot {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

std::string plot_svg(const Plot& plot, int width = 640, int height = 320);
// PNG file bytes of the plot rasterised at width x height.
std::string plot_png(const Plot& plot, int width = 640, int height = 320);

// `s` with < > & " escaped for HTML/SVG text and attribute values.
std::string html_escape(const std::string& s);

// PNG bytes of an 8-bit RGB image (rgb.size() == 3*w*h, row-major).
std::string encode_png(const std::vector<uint8_t>& rgb, int width, int height);

}  // namespace lm::report
