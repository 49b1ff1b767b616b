#pragma once
/// \file render.h
/// The pictures drawn onto a Canvas, so tests can look at the texts drawn (labels, ticks,
/// legend) beside the bytes. Internal.

#include <memory>
#include <vector>

#include "hyper/trace/internal/canvas.h"
#include "hyper/trace/plot.h"
#include "hyper/trace/step_picture.h"

namespace hyper::trace::internal {

/// Draws the step picture on a new canvas (validating the options as render_step_picture).
std::unique_ptr<Canvas> draw_step_picture(const std::vector<TimelineEvent>& events,
                                          const StepPictureOptions& options, ImageFormat format);

/// Draws the figure on a new canvas (validating it as render_figure).
std::unique_ptr<Canvas> draw_figure(const Figure& figure, ImageFormat format);

}  // namespace hyper::trace::internal
