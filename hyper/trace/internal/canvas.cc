#include "hyper/trace/internal/canvas.h"

#include <cairo-svg.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "hyper/core/errors.h"

namespace hyper::trace::internal {
namespace {

constexpr const char* kFont = "DejaVu Sans";

void check(cairo_status_t status, const char* what) {
  if (status != CAIRO_STATUS_SUCCESS) {
    throw std::runtime_error(::hyper::internal::str_cat("picture: ", what, ": ", cairo_status_to_string(status)));
  }
}

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void set_font(cairo_t* cr, double size, bool bold) {
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

void set_color(cairo_t* cr, Rgb c, double alpha = 1.0) {
  cairo_set_source_rgba(cr, c.r, c.g, c.b, alpha);
}

}  // namespace

double text_width(const std::string& text, double size, bool bold) {
  cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
  cairo_t* cr = cairo_create(s);
  set_font(cr, size, bold);
  cairo_text_extents_t e;
  cairo_text_extents(cr, text.c_str(), &e);
  cairo_destroy(cr);
  cairo_surface_destroy(s);
  return e.x_advance;
}

Canvas::Canvas(ImageFormat format, int width, int height)
    : format_(format), width_(width), height_(height) {
  if (format == ImageFormat::kSvg) {
    surface_ = cairo_svg_surface_create_for_stream(append, &svg_, width, height);
  } else {
    surface_ = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
  }
  check(cairo_surface_status(surface_), "cannot create the surface");
  cr_ = cairo_create(surface_);
  check(cairo_status(cr_), "cannot create the drawing context");
  set_color(cr_, palette::kWhite);
  cairo_paint(cr_);
}

Canvas::~Canvas() {
  if (cr_ != nullptr) cairo_destroy(cr_);
  if (surface_ != nullptr) cairo_surface_destroy(surface_);
}

void Canvas::rect(double x, double y, double w, double h, Rgb color, double alpha) {
  set_color(cr_, color, alpha);
  cairo_rectangle(cr_, x, y, w, h);
  cairo_fill(cr_);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb color, double width,
                  bool dashed) {
  polyline({{x0, y0}, {x1, y1}}, color, width, dashed);
}

void Canvas::polyline(const std::vector<std::pair<double, double>>& points, Rgb color,
                      double width, bool dashed) {
  if (points.size() < 2) return;
  set_color(cr_, color);
  cairo_set_line_width(cr_, width);
  cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
  const double dash[] = {6 * width / 2, 4 * width / 2};
  cairo_set_dash(cr_, dash, dashed ? 2 : 0, 0);
  cairo_move_to(cr_, points[0].first, points[0].second);
  for (size_t i = 1; i < points.size(); ++i) cairo_line_to(cr_, points[i].first, points[i].second);
  cairo_stroke(cr_);
  cairo_set_dash(cr_, nullptr, 0, 0);
}

void Canvas::dot(double x, double y, double radius, Rgb color) {
  cairo_new_sub_path(cr_);
  cairo_arc(cr_, x, y, radius, 0, 2 * M_PI);
  set_color(cr_, color);
  cairo_fill_preserve(cr_);
  set_color(cr_, palette::kWhite);
  cairo_set_line_width(cr_, 1.0);
  cairo_stroke(cr_);
}

double Canvas::text(double x, double y, const std::string& s, double size, Rgb color, Align align,
                    bool bold, bool vertical) {
  set_font(cr_, size, bold);
  cairo_text_extents_t e;
  cairo_text_extents(cr_, s.c_str(), &e);
  cairo_font_extents_t fe;
  cairo_font_extents(cr_, &fe);
  const double shift = align == Align::kLeft ? 0 : align == Align::kCenter ? e.x_advance / 2
                                                                            : e.x_advance;
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  if (vertical) cairo_rotate(cr_, -M_PI / 2);
  cairo_move_to(cr_, -shift, 0);
  set_color(cr_, color);
  cairo_show_text(cr_, s.c_str());
  cairo_restore(cr_);
  // Box along the text direction: [-shift, -shift + advance] x [-ascent, descent].
  const double a0 = -shift, a1 = -shift + e.x_advance, b0 = -fe.ascent, b1 = fe.descent;
  DrawnText d{s, size, 0, 0, 0, 0};
  if (vertical) {  // (u, v) -> (x + v, y - u)
    d.x0 = x + b0, d.x1 = x + b1, d.y0 = y - a1, d.y1 = y - a0;
  } else {
    d.x0 = x + a0, d.x1 = x + a1, d.y0 = y + b0, d.y1 = y + b1;
  }
  texts_.push_back(std::move(d));
  return e.x_advance;
}

std::string Canvas::finish() {
  check(cairo_status(cr_), "drawing failed");
  std::string out;
  if (format_ == ImageFormat::kSvg) {
    cairo_destroy(cr_);
    cr_ = nullptr;
    cairo_surface_finish(surface_);
    check(cairo_surface_status(surface_), "cannot finish the SVG");
    out.swap(svg_);
  } else {
    cairo_surface_flush(surface_);
    check(cairo_surface_write_to_png_stream(surface_, append, &out), "cannot encode the PNG");
  }
  return out;
}

}  // namespace hyper::trace::internal
