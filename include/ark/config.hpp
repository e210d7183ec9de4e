// ark/config.hpp: compiler and target detection. Together with the platform files under
// ark/platform/, this is the only place where ark branches on the compiler or the target.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__HIPCC__) || defined(__HIP__)
#define ARK_COMPILER_HIP 1
#elif defined(__CUDACC__)
#define ARK_COMPILER_CUDA 1
#endif

#if defined(ARK_COMPILER_HIP) || defined(ARK_COMPILER_CUDA)
#define ARK_GPU_COMPILER 1
#define ARK_HD __host__ __device__
#define ARK_DEVICE __device__
#define ARK_KERNEL __global__
#else
#define ARK_HD
#define ARK_DEVICE
#define ARK_KERNEL // a plain function: generic code may define kernels that only GPU builds launch
#endif

// CUDA with relocatable device code (nvcc -rdc=true, linked with cudadevrt): kernels can launch
// CUDA graphs, which engine_path::device_graphs needs (dma/graph_engine.hpp).
#if defined(ARK_COMPILER_CUDA) && defined(__CUDACC_RDC__)
#define ARK_HAS_DEVICE_GRAPH_LAUNCH 1
#endif

// True while compiling code for a GPU (the device pass of nvcc or hipcc).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define ARK_DEVICE_PASS 1
#endif

#if defined(_MSC_VER)
#define ARK_FORCEINLINE __forceinline
#else
#define ARK_FORCEINLINE inline __attribute__((always_inline))
#endif

// Before a host/device function template that may call host-only callables when instantiated
// for the host (nvcc checks each call otherwise; Thrust does the same).
#if defined(ARK_COMPILER_CUDA)
#define ARK_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define ARK_EXEC_CHECK_DISABLE
#endif

// A statement of a function that generic (host and device) code may name but that only ever runs
// on the host (the host platform and its scope): in a device pass it becomes a trap.
#if defined(ARK_DEVICE_PASS)
#define ARK_HOST_ONLY(...) __builtin_trap()
#else
#define ARK_HOST_ONLY(...) __VA_ARGS__
#endif

namespace ark {

/// Largest number of ranks a communicator may have. Kernel-facing handles hold one base pointer per
/// rank, so this bounds their size (max_world * 8 bytes).
inline constexpr int max_world = 64;

/// Buffers aligned to this many bytes take the vector path; buffers that are only aligned to their
/// element type (the requirement) are read and written element by element, correctly but slower.
inline constexpr std::size_t vector_alignment = 16;

} // namespace ark
