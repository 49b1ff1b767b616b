#include "hyper/trace/image.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "hyper/core/errors.h"

namespace hyper::trace {

const char* to_string(ImageFormat format) { return format == ImageFormat::kSvg ? "svg" : "png"; }

ImageFormat image_format_of(const std::string& path) {
  const auto dot = path.find_last_of('.');
  const auto slash = path.find_last_of('/');
  std::string ext = dot == std::string::npos || (slash != std::string::npos && dot < slash)
                        ? std::string()
                        : path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == "png") return ImageFormat::kPng;
  if (ext == "svg") return ImageFormat::kSvg;
  throw ValueError(::hyper::internal::str_cat("picture path '", path, "' ends in '",
                                     ext.empty() ? std::string("(no extension)") : "." + ext,
                                     "'; expected .png or .svg"));
}

void write_file(const std::string& path, const std::string& bytes, const std::string& what) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (f) f.close();
  if (!f) {
    const int err = errno;
    throw std::runtime_error(::hyper::internal::str_cat("cannot write the ", what, " to '", path, "'",
                                               err != 0 ? std::string(": ") + std::strerror(err)
                                                        : std::string()));
  }
}

}  // namespace hyper::trace
