// ark/platform/gpu_atomics.hpp: system-scope atomics, clocks and vector accesses in GPU device code
// (ark::detail::gpu), in the vendor's spelling: platform/cuda/atomics.hpp (PTX) or
// platform/hip/atomics.hpp (clang's scoped atomic builtins).
//
// They exist in the device pass only. platform::gpu's members call them there and the host
// platform's functions in the host pass (platform/gpu.hpp, ARK_GPU_OR_HOST), so host code that
// names platform::gpu (the engine's host thread, the tests' host reference) never reaches them.
#pragma once

#include "ark/config.hpp"

#if defined(ARK_DEVICE_PASS) && defined(ARK_COMPILER_CUDA)
#include "ark/platform/cuda/atomics.hpp"
#elif defined(ARK_DEVICE_PASS) && defined(ARK_COMPILER_HIP)
#include "ark/platform/hip/atomics.hpp"
#endif
