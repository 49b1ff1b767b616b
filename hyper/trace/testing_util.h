#pragma once
/// \file testing_util.h
/// Test helpers of the trace module: events made in one line, an error check on the message,
/// a PNG decoded by cairo (an independent reader of what cairo's encoder wrote), pixel counts,
/// and checks on the texts a picture drew. Header-only; not installed.

#include <cairo.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hyper/trace/event.h"
#include "hyper/trace/internal/canvas.h"
#include "hyper/trace/palette.h"

namespace hyper::trace::testing {

inline TimelineEvent ev(const std::string& name, RegionKind kind, int rank, double start_us,
                        double end_us, const std::string& stream = "") {
  TimelineEvent t;
  t.name = name, t.kind = kind, t.rank = rank, t.start_us = start_us, t.end_us = end_us;
  t.stream = stream;
  return t;
}

/// Runs `f` and expects an `E` whose message contains `text`.
template <class E, class F>
void expect_error(F f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an exception with '" << text << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

/// A decoded image: 0xRRGGBB per pixel, row-major.
struct Image {
  int width = 0, height = 0;
  std::vector<uint32_t> px;
  uint32_t at(int x, int y) const { return px[static_cast<size_t>(y) * width + x]; }
};

/// Decodes `png` with cairo_image_surface_create_from_png_stream; width 0 when it fails.
inline Image decode_png(const std::string& png) {
  struct Reader {
    const std::string* data;
    size_t at = 0;
  } reader{&png};
  auto read = [](void* closure, unsigned char* out, unsigned int length) {
    auto* r = static_cast<Reader*>(closure);
    if (r->at + length > r->data->size()) return CAIRO_STATUS_READ_ERROR;
    std::memcpy(out, r->data->data() + r->at, length);
    r->at += length;
    return CAIRO_STATUS_SUCCESS;
  };
  cairo_surface_t* s = cairo_image_surface_create_from_png_stream(read, &reader);
  Image img;
  if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
    cairo_surface_flush(s);
    img.width = cairo_image_surface_get_width(s);
    img.height = cairo_image_surface_get_height(s);
    const int stride = cairo_image_surface_get_stride(s);
    const unsigned char* data = cairo_image_surface_get_data(s);
    for (int y = 0; y < img.height; ++y) {
      const auto* row = reinterpret_cast<const uint32_t*>(data + static_cast<size_t>(y) * stride);
      for (int x = 0; x < img.width; ++x) img.px.push_back(row[x] & 0xFFFFFFu);
    }
  }
  cairo_surface_destroy(s);
  return img;
}

inline uint32_t rgb_of(Rgb c) {
  auto ch = [](double v) { return static_cast<uint32_t>(std::lround(v * 255)); };
  return (ch(c.r) << 16) | (ch(c.g) << 8) | ch(c.b);
}

/// Pixels of exactly `color`.
inline int64_t count(const Image& img, Rgb color) {
  const uint32_t want = rgb_of(color);
  int64_t n = 0;
  for (uint32_t p : img.px) n += p == want;
  return n;
}

/// Pixels that are not white.
inline int64_t count_not_white(const Image& img) {
  int64_t n = 0;
  for (uint32_t p : img.px) n += p != 0xFFFFFFu;
  return n;
}

/// True when some drawn text equals `s`.
inline bool drew(const std::vector<internal::DrawnText>& texts, const std::string& s) {
  for (const auto& t : texts) {
    if (t.text == s) return true;
  }
  return false;
}

/// Every text lies inside the canvas and is at least `min_size` points.
inline void expect_readable(const internal::Canvas& c, double min_size) {
  for (const auto& t : c.texts()) {
    EXPECT_GE(t.size, min_size) << t.text;
    EXPECT_GE(t.x0, -0.5) << t.text;
    EXPECT_GE(t.y0, -0.5) << t.text;
    EXPECT_LE(t.x1, c.width() + 0.5) << t.text;
    EXPECT_LE(t.y1, c.height() + 0.5) << t.text;
  }
}

/// No two drawn texts overlap (boxes shrunk by `slack` points on each side).
inline void expect_no_overlap(const internal::Canvas& c, double slack = 1.0) {
  const auto& t = c.texts();
  for (size_t i = 0; i < t.size(); ++i) {
    for (size_t j = i + 1; j < t.size(); ++j) {
      const bool apart = t[i].x1 - slack <= t[j].x0 || t[j].x1 - slack <= t[i].x0 ||
                         t[i].y1 - slack <= t[j].y0 || t[j].y1 - slack <= t[i].y0;
      EXPECT_TRUE(apart) << "'" << t[i].text << "' overlaps '" << t[j].text << "'";
    }
  }
}

}  // namespace hyper::trace::testing
