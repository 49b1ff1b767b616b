#pragma once
/// \file core.h
/// Umbrella header of hyper::core, the torch-free geometry core: placements, mesh
/// topology, layouts, intervals and boxes, redistribution plans and checkpoint read
/// plans. Needs nothing but the C++17 standard library.

#include "hyper/core/errors.h"
#include "hyper/core/flat_bucket.h"
#include "hyper/core/format.h"
#include "hyper/core/geometry.h"
#include "hyper/core/layout.h"
#include "hyper/core/mesh_topology.h"
#include "hyper/core/placement.h"
#include "hyper/core/plan_executor.h"
#include "hyper/core/read_plan.h"
#include "hyper/core/redistribute_plan.h"
#include "hyper/core/plan_steps.h"
