#pragma once
/// \file trace.h
/// Umbrella header of hyper::trace, the torch-free instrumentation module: the Observer that
/// instrumented code reports to, the Timeline recorder, overlap arithmetic, the Chrome-trace
/// writer, and the step picture and report plots (cairo; PNG or SVG).

#include "hyper/trace/chrome_trace.h"
#include "hyper/trace/event.h"
#include "hyper/trace/image.h"
#include "hyper/trace/observer.h"
#include "hyper/trace/overlap.h"
#include "hyper/trace/palette.h"
#include "hyper/trace/plot.h"
#include "hyper/trace/step_picture.h"
#include "hyper/trace/timeline.h"
