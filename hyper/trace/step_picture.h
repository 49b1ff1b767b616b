#pragma once
/// \file step_picture.h
/// The picture of one step's recorded regions, drawn with cairo: one row per (rank, row) with
/// compute bars in blue and communication bars in orange (names written inside when they
/// fit), a green strip under each rank where its communication is hidden by its computation,
/// a labelled time axis, a legend, and the overlap fraction in the subtitle. Colours come from
/// palette.h.

#include <string>
#include <vector>

#include "hyper/trace/event.h"
#include "hyper/trace/image.h"

namespace hyper::trace {

struct StepPictureOptions {
  int width = 1400;       ///< points (= PNG pixels), in [400, 20000]
  int row_height = 26;    ///< points per row, in [12, 400]
  std::string title;      ///< top line; empty: "Step timeline"
};

/// The picture as PNG or SVG bytes. An empty `events` gives the frame with "no regions
/// recorded". Throws hyper::ValueError naming the value for options out of range or a
/// picture taller than 32767 points; std::runtime_error when cairo fails.
std::string render_step_picture(const std::vector<TimelineEvent>& events,
                                const StepPictureOptions& options = {},
                                ImageFormat format = ImageFormat::kPng);

/// Writes the picture to `path`, PNG or SVG by its extension (image_format_of). Throws as
/// render_step_picture and image_format_of, and std::runtime_error naming the path when it
/// cannot be written.
void write_step_picture(const std::string& path, const std::vector<TimelineEvent>& events,
                        const StepPictureOptions& options = {});

}  // namespace hyper::trace
