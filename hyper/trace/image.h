#pragma once
/// \file image.h
/// The picture formats hyper's plots are written in, chosen by the file name.

#include <string>

namespace hyper::trace {

/// PNG (a raster image, 1 px per point) or SVG (vector; text drawn as glyph outlines).
enum class ImageFormat { kPng, kSvg };

/// "png" / "svg".
const char* to_string(ImageFormat format);

/// The format named by `path`'s extension (".png" or ".svg", any case). Throws
/// hyper::ValueError naming the path for any other extension.
ImageFormat image_format_of(const std::string& path);

/// Writes `bytes` to `path` (created or truncated). Throws std::runtime_error naming `what`
/// and the path when the file cannot be written.
void write_file(const std::string& path, const std::string& bytes, const std::string& what);

}  // namespace hyper::trace
