// ark/platform/gpu_runtime.hpp: the runtime calls ark makes on GPUs, as ark::detail::rt names.
//
// Each vendor spells them in a file of its own (platform/cuda/runtime.hpp,
// platform/hip/runtime.hpp), with the same names, types and meaning; this file includes the one
// the compiler asks for, so platform/gpu.hpp is one implementation for both. Nothing above the
// platform layer names a cuda*/hip* call or type: it names rt::... or platform::gpu.
#pragma once

#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <string>

#if defined(ARK_COMPILER_CUDA)
#include "ark/platform/cuda/runtime.hpp"
#elif defined(ARK_COMPILER_HIP)
#include "ark/platform/hip/runtime.hpp"
#else
#error "ark/platform/gpu_runtime.hpp needs nvcc or hipcc"
#endif

namespace ark::detail::rt {

/// Throws platform_error naming the call when `e` is not success.
inline void check(error_t e, const char* what) {
  if (e != success) throw platform_error(std::string(vendor) + ": " + what + ": " + error_string(e));
}

} // namespace ark::detail::rt
