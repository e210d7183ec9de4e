// ark/platform/platform.hpp: every platform this compiler can build. The host platform always;
// with nvcc or hipcc also the GPU platform (platform::cuda or platform::hip, platform/gpu.hpp).
// The umbrella header (ark/ark.hpp) includes this file, so the choice is made here, in the
// platform layer, and not above it.
#pragma once

#include "ark/config.hpp"
#include "ark/platform/host.hpp"

#if defined(ARK_GPU_COMPILER)
#include "ark/platform/gpu.hpp"
#endif

namespace ark::platform {
/// The platform this compiler builds for: the GPU under nvcc or hipcc, else the host platform
/// (ranks as CPU threads). A program that names it builds either way from one source (the
/// examples do).
#if defined(ARK_GPU_COMPILER)
using native = gpu;
#else
using native = host;
#endif
} // namespace ark::platform
