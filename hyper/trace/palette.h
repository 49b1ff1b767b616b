#pragma once
/// \file palette.h
/// The one colour palette of hyper's pictures (the step picture and the benchmark plots):
/// the Okabe–Ito colours, distinguishable with the common colour-vision deficiencies and in
/// greyscale print, plus the neutral greys of text, axes, grids and bands.

#include <array>
#include <cstdint>

namespace hyper::trace {

/// An sRGB colour, each channel in [0, 1].
struct Rgb {
  double r = 0, g = 0, b = 0;
  /// From 0xRRGGBB.
  static constexpr Rgb hex(uint32_t v) {
    return {((v >> 16) & 0xff) / 255.0, ((v >> 8) & 0xff) / 255.0, (v & 0xff) / 255.0};
  }
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

namespace palette {

inline constexpr Rgb kBlue = Rgb::hex(0x0072B2);
inline constexpr Rgb kOrange = Rgb::hex(0xE69F00);
inline constexpr Rgb kGreen = Rgb::hex(0x009E73);
inline constexpr Rgb kVermillion = Rgb::hex(0xD55E00);
inline constexpr Rgb kSky = Rgb::hex(0x56B4E9);
inline constexpr Rgb kPurple = Rgb::hex(0xCC79A7);
inline constexpr Rgb kYellow = Rgb::hex(0xF0E442);
inline constexpr Rgb kGrey = Rgb::hex(0x7F7F7F);

/// Series colours in the order plots assign them.
inline constexpr std::array<Rgb, 7> kSeries = {kBlue, kOrange, kGreen, kVermillion,
                                               kSky,  kPurple, kGrey};

inline constexpr Rgb kText = Rgb::hex(0x222222);
inline constexpr Rgb kAxis = Rgb::hex(0x555555);
inline constexpr Rgb kGrid = Rgb::hex(0xDDDDE2);
inline constexpr Rgb kBand = Rgb::hex(0xF3F3F6);
inline constexpr Rgb kWhite = Rgb::hex(0xFFFFFF);

/// The step picture's roles.
inline constexpr Rgb kCompute = kBlue;
inline constexpr Rgb kComm = kOrange;
inline constexpr Rgb kHiddenComm = kGreen;

}  // namespace palette
}  // namespace hyper::trace
