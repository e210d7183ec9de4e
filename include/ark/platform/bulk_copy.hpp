// ark/platform/bulk_copy.hpp: bulk copies through shared memory (ark::detail::bulk_copy), where
// the target has them: the TMA unit of NVIDIA sm_90 and newer (platform/cuda/bulk_copy_sm90.hpp).
//
// Every pass sees the same two names, so dma::tma is written once with no #if:
//   publish()              every thread, after its stores into a copy's source, before the
//                          block barrier that precedes the copy;
//   copy<Depth, Chunk>()   one thread, returns once the bytes landed.
// In nvcc's device pass for sm_90+ they are the bulk copies. In any other device pass (HIP, an
// older NVIDIA GPU) copy() is a compile-time error naming the requirement, as soon as code that
// runs on the device uses it. In a host pass (the host platform, or the host side of a GPU
// compilation, where no device code runs) both do nothing: dma::tma refuses the host platform
// itself, and on a GPU its copies run only in the device pass.
#pragma once

#include "ark/config.hpp"

#include <cstddef>
#include <cstdint>

#if defined(ARK_COMPILER_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include "ark/platform/cuda/bulk_copy_sm90.hpp"
#else
namespace ark::detail::bulk_copy {

template <unsigned>
inline constexpr bool needs_sm90 = false;

ARK_HD inline void publish() {}

template <unsigned Depth, std::uint32_t ChunkBytes>
ARK_HD void copy(void*, const void*, std::size_t) {
#if defined(ARK_DEVICE_PASS)
  static_assert(needs_sm90<Depth>, "ark::dma::tma (bulk copies) needs NVIDIA sm_90 or newer: compile with "
                                   "-arch=sm_90");
#endif
}

} // namespace ark::detail::bulk_copy
#endif
