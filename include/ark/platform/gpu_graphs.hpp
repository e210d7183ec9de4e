// ark/platform/gpu_graphs.hpp: graphs that device code launches, where the platform has them.
//
// Today that is CUDA built with relocatable device code (config.hpp: ARK_HAS_DEVICE_GRAPH_LAUNCH):
// the GPU platform and its graph calls (platform/cuda/graphs.hpp). Anywhere else this file
// declares nothing, and dma::graph_engine, which needs them, is not defined.
#pragma once

#include "ark/config.hpp"

#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
#include "ark/platform/cuda/graphs.hpp"
#include "ark/platform/gpu.hpp"
#endif
