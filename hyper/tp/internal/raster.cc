#include "hyper/tp/internal/raster.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace hyper::tp::internal {

uint16_t glyph(char c) {
  static const std::array<uint16_t, 36> kAlnum = {
      // 0-9
      075557, 026227, 071747, 071717, 055711, 074717, 074757, 071111, 075757, 075717,
      // a-z
      025755, 065656, 034443, 065556, 074647, 074644, 034553, 055755, 072227, 011152,
      055655, 044447, 057755, 065555, 025552, 065644, 025563, 065655, 034216, 072222,
      055557, 055552, 055775, 055255, 055222, 071247};
  if (c >= '0' && c <= '9') return kAlnum[c - '0'];
  if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  if (c >= 'a' && c <= 'z') return kAlnum[10 + (c - 'a')];
  switch (c) {
    case '.': return 000002;
    case '-': return 000700;
    case '_': return 000007;
    case ':': return 002020;
    case '/': return 011244;
    case '%': return 051245;
    case '(': return 012221;
    case ')': return 042224;
    case '=': return 007070;
    default: return 0;
  }
}

Canvas::Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3, 255) {}

void Canvas::fill(int x0, int y0, int x1, int y1, Rgb c) {
  x0 = std::max(x0, 0), y0 = std::max(y0, 0), x1 = std::min(x1, w_), y1 = std::min(y1, h_);
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
      p[0] = c.r, p[1] = c.g, p[2] = c.b;
    }
  }
}

int Canvas::text(int x, int y, const std::string& s, Rgb c) {
  for (char ch : s) {
    const uint16_t g = glyph(ch);
    for (int row = 0; row < 5; ++row) {
      for (int col = 0; col < 3; ++col) {
        if (g & (1u << ((4 - row) * 3 + (2 - col)))) {
          fill(x + col * 2, y + row * 2, x + col * 2 + 2, y + row * 2 + 2, c);
        }
      }
    }
    x += kGlyphAdvance;
  }
  return x;
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int thickness) {
  // Bresenham; each point stamps a thickness x thickness square centred on the line.
  const int t = std::max(thickness, 1);
  const int lo = -(t - 1) / 2, hi = lo + t;
  const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
  const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (int guard = 0; guard <= dx - dy + 1; ++guard) {
    fill(x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, out.data() + type_at, static_cast<uInt>(4 + data.size()));
  put_u32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::vector<uint8_t> encode_png(const Canvas& canvas) {
  const int w = canvas.width(), h = canvas.height();
  std::vector<uint8_t> raw;
  raw.reserve(static_cast<size_t>(h) * (1 + w * 3));
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    const uint8_t* row = canvas.pixels().data() + static_cast<size_t>(y) * w * 3;
    raw.insert(raw.end(), row, row + static_cast<size_t>(w) * 3);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(zlen);
  if (compress2(z.data(), &zlen, raw.data(), static_cast<uLong>(raw.size()), 6) != Z_OK) {
    throw std::runtime_error("PNG encoder: zlib compress2 failed on a " + std::to_string(w) +
                             "x" + std::to_string(h) + " image");
  }
  z.resize(zlen);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, static_cast<uint32_t>(w));
  put_u32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter/interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}

double tick_step(double span, int max_ticks) {
  const double raw = span / std::max(max_ticks, 1);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

}  // namespace hyper::tp::internal
