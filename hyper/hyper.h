#pragma once
/// \file hyper.h
/// Umbrella header of everything public in hyper:
/// - the torch-free core (placements, mesh topology, layouts, redistribution plans):
///   hyper/core.h;
/// - the comm layer without c10d types: World and init_process_group, DeviceMesh,
///   variable-length collectives, Work handles, byte counters, differentiable collectives;
/// - DTensor and its elementwise ops;
/// - hookable modules (hyper::nn), tensor parallelism (hyper::tp) and the distributed
///   checkpoint (hyper::dcp);
/// - the torch-free trace module (observer, timeline, Chrome trace, pictures): hyper/trace.h.
/// c10d interop (hyper/comm/c10d_interop.h) is deliberately not included: it exposes
/// c10d's ProcessGroup and Store; include it where you need them.
///
///   #include <hyper/hyper.h>
///   hyper::World world = hyper::init_process_group();
///   auto mesh = hyper::init_device_mesh(world, "cpu", {2, 2}, {"dp", "tp"});
///   auto dt = hyper::distribute_tensor(global, mesh, {hyper::Shard(0), hyper::Replicate()});

#include "hyper/core.h"
#include "hyper/trace.h"

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/functional.h"
#include "hyper/comm/stats.h"
#include "hyper/comm/work.h"
#include "hyper/comm/world.h"

#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/ops.h"

#include "hyper/nn/hookable.h"
#include "hyper/nn/modules.h"

#include "hyper/tp/distribute_module.h"
#include "hyper/tp/parallelize.h"
#include "hyper/tp/style.h"

#include "hyper/dcp/state_dict.h"
#include "hyper/fsdp/flat_bucket.h"
#include "hyper/fsdp/fully_shard.h"
