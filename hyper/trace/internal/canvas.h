#pragma once
/// \file canvas.h
/// A drawing surface over cairo for the trace module's pictures (step_picture.cc, plot.cc):
/// PNG or SVG, a white background, DejaVu Sans text with measured extents, and a log of
/// every text drawn (for tests: which labels a picture has and where). Internal.

#include <cairo.h>

#include <string>
#include <utility>
#include <vector>

#include "hyper/trace/image.h"
#include "hyper/trace/palette.h"

namespace hyper::trace::internal {

/// One text drawn: its string, font size and bounding box (points, y down).
struct DrawnText {
  std::string text;
  double size = 0;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

enum class Align { kLeft, kCenter, kRight };

/// Font sizes (points) shared by the pictures.
inline constexpr double kTitleSize = 18;
inline constexpr double kLabelSize = 14;
inline constexpr double kTickSize = 12.5;
inline constexpr double kSmallSize = 11;

/// Width of `text` at `size` (bold or not), measured without a canvas.
double text_width(const std::string& text, double size, bool bold = false);

class Canvas {
 public:
  /// A white `width` x `height` canvas (points = PNG pixels). Throws std::runtime_error when
  /// cairo cannot make the surface.
  Canvas(ImageFormat format, int width, int height);
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  int width() const { return width_; }
  int height() const { return height_; }
  cairo_t* cr() { return cr_; }

  void rect(double x, double y, double w, double h, Rgb color, double alpha = 1.0);
  void line(double x0, double y0, double x1, double y1, Rgb color, double width,
            bool dashed = false);
  /// A polyline through `points`.
  void polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                bool dashed = false);
  /// A filled circle with a white rim.
  void dot(double x, double y, double radius, Rgb color);
  /// Text with its baseline at `y`, aligned at `x`; `vertical` turns it 90° counter-clockwise
  /// around (x, y) (then `align` is along the rotated direction). Returns the advance width.
  double text(double x, double y, const std::string& s, double size, Rgb color,
              Align align = Align::kLeft, bool bold = false, bool vertical = false);

  /// Every text drawn so far.
  const std::vector<DrawnText>& texts() const { return texts_; }
  /// Finishes the picture and returns the file's bytes. Throws std::runtime_error on a cairo
  /// error.
  std::string finish();

 private:
  ImageFormat format_;
  int width_, height_;
  std::string svg_;  // the SVG stream's bytes
  cairo_surface_t* surface_ = nullptr;
  cairo_t* cr_ = nullptr;
  std::vector<DrawnText> texts_;
};

}  // namespace hyper::trace::internal
