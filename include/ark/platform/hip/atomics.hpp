// ark/platform/hip/atomics.hpp: system-scope atomics, the clock and vector accesses in HIP device
// code, with clang's scoped atomic builtins (ark::detail::gpu). platform/cuda/atomics.hpp defines
// the same functions for CUDA; platform/gpu_atomics.hpp includes the one a device pass needs.
//
// Every flag access is at system scope (__HIP_MEMORY_SCOPE_SYSTEM), for the reason the CUDA file
// gives. The CUDA file's volatile accesses are relaxed system-scope atomic loads and stores here:
// each 8-byte half single-copy atomic, as LL packets need.
#pragma once

#include "ark/config.hpp"
#include "ark/platform/hip/runtime.hpp"

#include <cstdint>

#if !defined(__HIP_DEVICE_COMPILE__)
#error "ark/platform/hip/atomics.hpp is device code: platform/gpu_atomics.hpp includes it"
#endif

namespace ark::detail::gpu {

ARK_DEVICE ARK_FORCEINLINE std::uint64_t load_acquire(const std::uint64_t* p) {
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t load_relaxed(const std::uint64_t* p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE std::uint32_t load_relaxed(const std::uint32_t* p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE void store_release(std::uint64_t* p, std::uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE void store_release(std::uint32_t* p, std::uint32_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE void store_relaxed(std::uint64_t* p, std::uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE bool compare_exchange(std::uint32_t* p, std::uint32_t expected,
                                                 std::uint32_t desired) {
  return __hip_atomic_compare_exchange_strong(p, &expected, desired, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED,
                                              __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE void fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
/// wall_clock64() ticks at a constant 100 MHz on gfx90a and gfx94x. Spans compared with it come from
/// the host in these units at the GPU's own rate (platform::gpu::device_span_ns).
ARK_DEVICE ARK_FORCEINLINE std::uint64_t now_ns() { return static_cast<std::uint64_t>(wall_clock64()) * 10u; }
ARK_DEVICE ARK_FORCEINLINE void load_pair_volatile(const void* p, std::uint64_t& a, std::uint64_t& b) {
  const auto* q = static_cast<const std::uint64_t*>(p);
  a = __hip_atomic_load(q, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  b = __hip_atomic_load(q + 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE void store_pair_volatile(void* p, std::uint64_t a, std::uint64_t b) {
  auto* q = static_cast<std::uint64_t*>(p);
  __hip_atomic_store(q, a, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_store(q + 1, b, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t load_volatile(const void* p) {
  return __hip_atomic_load(static_cast<const std::uint64_t*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
ARK_DEVICE ARK_FORCEINLINE void follow_previous_grid() {}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t opaque(std::uint64_t v) { return v; } // no early launch on HIP
ARK_DEVICE ARK_FORCEINLINE std::uint32_t opaque(std::uint32_t v) { return v; }
ARK_DEVICE ARK_FORCEINLINE void compute_here(std::uint64_t) {}

} // namespace ark::detail::gpu
