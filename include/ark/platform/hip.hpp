// ark/platform/hip.hpp: the HIP platform, ark::platform::hip (the GPU platform built by hipcc).
#pragma once
#if !defined(__HIPCC__) && !defined(__HIP__)
#error "ark/platform/hip.hpp must be compiled by hipcc"
#endif
#include "ark/platform/gpu.hpp"
