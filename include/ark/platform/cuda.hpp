// ark/platform/cuda.hpp: the CUDA platform, ark::platform::cuda (the GPU platform built by nvcc).
#pragma once
#if !defined(__CUDACC__)
#error "ark/platform/cuda.hpp must be compiled by nvcc"
#endif
#include "ark/platform/gpu.hpp"
