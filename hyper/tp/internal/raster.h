#pragma once
/// \file raster.h
/// A small RGB raster canvas, a 3x5 bitmap font drawn at scale 2, a PNG encoder (zlib) and
/// a "nice" tick step. Shared by the step-timeline PNG (hyper/tp/timeline.cc) and the
/// benchmark plots (bench/bench_report.cc). Torch-free: the standard library and zlib only,
/// so torch-free programs can compile raster.cc on its own. Internal: not installed.

#include <cstdint>
#include <string>
#include <vector>

namespace hyper::tp::internal {

struct Rgb {
  uint8_t r, g, b;
};

/// 3x5 glyph of `c` (case-insensitive), rows top to bottom, 3 bits per row (bit 2 = left
/// column); 0 (blank) for characters the font lacks. Has 0-9, a-z and . - _ : / % ( ) =.
uint16_t glyph(char c);

/// An RGB image, white when made. Every drawing call clips to the image.
class Canvas {
 public:
  static constexpr int kGlyphAdvance = 8;  ///< px per character of text()
  static constexpr int kGlyphHeight = 10;  ///< px height of text()

  Canvas(int w, int h);
  int width() const { return w_; }
  int height() const { return h_; }
  /// Fills [x0,x1) x [y0,y1).
  void fill(int x0, int y0, int x1, int y1, Rgb c);
  /// Text at scale 2 (6x10 glyphs, 8 px advance) with its top-left at (x, y); returns the
  /// end x.
  int text(int x, int y, const std::string& s, Rgb c);
  /// Width in px that text() covers for `s` (without the trailing advance gap).
  static int text_width(const std::string& s) {
    return s.empty() ? 0 : static_cast<int>(s.size()) * kGlyphAdvance - 2;
  }
  /// A straight line from (x0, y0) to (x1, y1), `thickness` px wide (square pen).
  void line(int x0, int y0, int x1, int y1, Rgb c, int thickness = 1);
  /// Row-major RGB bytes, 3 per pixel.
  const std::vector<uint8_t>& pixels() const { return px_; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

/// The canvas as an 8-bit RGB PNG (no filter, zlib level 6). Throws std::runtime_error if
/// zlib fails.
std::vector<uint8_t> encode_png(const Canvas& canvas);

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving at most `max_ticks` ticks
/// over `span` (> 0).
double tick_step(double span, int max_ticks);

}  // namespace hyper::tp::internal
