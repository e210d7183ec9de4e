// ark/platform/cuda/graphs.hpp: CUDA graphs that device code launches (ark::detail::rt names), the
// mechanism under dma::graph_engine (engine_path::device_graphs).
//
// Building a graph is host code: an empty graph, a copy node, kernel nodes after it, instantiated
// for device launch and uploaded, so that a kernel's launch finds everything in place. Launching
// is device code: a graph launched "fire and forget" runs apart from the kernel that launched it,
// in no order with the others; a tail launch runs once the launching graph's execution ended.
// Only relocatable device code linked with the device runtime (nvcc -rdc=true, cudadevrt) may
// launch graphs: config.hpp defines ARK_HAS_DEVICE_GRAPH_LAUNCH then, and platform/gpu.hpp includes
// this file only then (platform::gpu's graph members are made of it).
#pragma once

#include "ark/platform/cuda/runtime.hpp"

#include <cstddef>

#if !defined(__CUDACC_RDC__)
#error "ark/platform/cuda/graphs.hpp needs relocatable device code: nvcc -rdc=true, linked with cudadevrt"
#endif

namespace ark::detail::rt {

using graph_node_t = cudaGraphNode_t;

// Host side -----------------------------------------------------------------------------------

/// An empty graph.
inline error_t graph_create(graph_t* g) { return cudaGraphCreate(g, 0); }

/// A node of g, depending on none, that copies `bytes` from src to dst, both device memory (a
/// peer's mapped memory included: the copy runs on a copy engine).
inline error_t graph_add_copy(graph_node_t* node, graph_t g, void* dst, const void* src, std::size_t bytes) {
  return cudaGraphAddMemcpyNode1D(node, g, nullptr, 0, dst, src, bytes, cudaMemcpyDeviceToDevice);
}

/// A node of g that runs kernel k as one block of `threads` threads, after node `after` (after
/// none when null). `args` points to k's arguments, which the node copies.
template <class... A>
inline error_t graph_add_kernel(graph_node_t* node, graph_t g, const graph_node_t* after, void (*k)(A...),
                                unsigned threads, void** args) {
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(k);
  p.gridDim = dim3(1);
  p.blockDim = dim3(threads);
  p.kernelParams = args;
  return cudaGraphAddKernelNode(node, g, after, after ? 1 : 0, &p);
}

/// Instantiates g so that device code may launch it. g itself may be destroyed afterwards.
inline error_t graph_instantiate_for_device_launch(graph_exec_t* e, graph_t g) {
  return cudaGraphInstantiateWithFlags(e, g, cudaGraphInstantiateFlagDeviceLaunch);
}

/// Uploads e's resources to its device, ordered on stream s: a graph device code launches must be
/// uploaded (or launched from the host once) before its first device launch.
inline error_t graph_upload(graph_exec_t e, stream_t s) { return cudaGraphUpload(e, s); }

// Device side ---------------------------------------------------------------------------------

/// Launches e fire and forget: it runs apart from the launching kernel and from every other graph
/// launched so, in any order. False if the device runtime refused (among other reasons, e is a
/// graph whose previous execution has not ended: a graph runs one execution at a time).
__device__ inline bool graph_launch_fire_and_forget(graph_exec_t e) {
  return cudaGraphLaunch(e, cudaStreamGraphFireAndForget) == cudaSuccess;
}

/// Launches again the graph whose kernel calls this, to start once its current execution ended
/// (a tail launch): how a graph runs on past the launches one execution may make.
__device__ inline bool graph_tail_launch_self() {
  return cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch) == cudaSuccess;
}

} // namespace ark::detail::rt
