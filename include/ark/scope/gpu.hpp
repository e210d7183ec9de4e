// ark/scope/gpu.hpp: scope models on GPUs (CUDA and HIP spell these the same).
#pragma once

#include "ark/concepts/scope.hpp"

#if defined(ARK_GPU_COMPILER)

namespace ark {

/// The threads of one (one-dimensional) thread block.
struct block_scope {
  ARK_DEVICE unsigned thread_rank() const { return threadIdx.x; }
  ARK_DEVICE unsigned size() const { return blockDim.x; }
  ARK_DEVICE void sync() { __syncthreads(); }
  ARK_DEVICE bool sync_any(bool p) { return __syncthreads_or(p ? 1 : 0) != 0; }
};

static_assert(scope<block_scope>);

} // namespace ark

#endif
