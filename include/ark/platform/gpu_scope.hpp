// ark/platform/gpu_scope.hpp: block_scope, the scope a GPU worker's threads form (one thread block).
//
// A scope is how a platform runs a worker's threads, so its model lives with the platform that
// constructs it: platform::gpu's kernel makes one block_scope per block and hands it to the work
// (platform/gpu.hpp, run_workers). CUDA and HIP spell the block's builtins alike; the one
// difference, an unoptimized HIP build's sync_any, is below.
#pragma once

#include "ark/concepts/scope.hpp"
#include "ark/config.hpp"

#if !defined(ARK_GPU_COMPILER)
#error "ark/platform/gpu_scope.hpp needs nvcc or hipcc"
#endif

namespace ark {

/// The threads of one (one-dimensional) thread block.
struct block_scope {
  ARK_DEVICE unsigned thread_rank() const { return threadIdx.x; }
  ARK_DEVICE unsigned size() const { return blockDim.x; }
  ARK_DEVICE void sync() { __syncthreads(); }
  ARK_DEVICE bool sync_any(bool p) {
#if defined(ARK_COMPILER_HIP) && !defined(__OPTIMIZE__)
    // Unoptimized (-O0, a debug build), ROCm's __syncthreads_or leaves a wave32 branch of its
    // device library in gfx9 code, which the backend cannot compile ("Cannot select: intrinsic
    // llvm.amdgcn.permlanex16"): a shared word instead, at three barriers (earlier readers done,
    // cleared, set)
    __shared__ int any;
    __syncthreads();
    if (threadIdx.x == 0) any = 0;
    __syncthreads();
    if (p) __hip_atomic_store(&any, 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
    __syncthreads();
    return any != 0;
#else
    return __syncthreads_or(p ? 1 : 0) != 0;
#endif
  }
};

static_assert(scope<block_scope>);

} // namespace ark
