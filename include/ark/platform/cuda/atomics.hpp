// ark/platform/cuda/atomics.hpp: system-scope atomics, the clock and volatile vector accesses in
// CUDA device code, in PTX (ark::detail::gpu). platform/hip/atomics.hpp defines the same functions
// for HIP; platform/gpu_atomics.hpp includes the one a device pass needs.
//
// Every flag access is at system scope (.sys): peers' flags live in other GPUs' memory and in
// mapped host memory, and an acquire or release at a narrower scope would not order the data a
// peer or the host wrote. Every memory access below has a memory clobber, so the compiler neither
// caches nor moves ordinary accesses across it.
#pragma once

#include "ark/config.hpp"

#include <cstdint>

#if !defined(__CUDA_ARCH__)
#error "ark/platform/cuda/atomics.hpp is device code: platform/gpu_atomics.hpp includes it"
#endif

namespace ark::detail::gpu {

ARK_DEVICE ARK_FORCEINLINE std::uint64_t load_acquire(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t load_relaxed(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
ARK_DEVICE ARK_FORCEINLINE std::uint32_t load_relaxed(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
ARK_DEVICE ARK_FORCEINLINE void store_release(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
ARK_DEVICE ARK_FORCEINLINE void store_release(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
ARK_DEVICE ARK_FORCEINLINE void store_relaxed(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
  std::uint64_t old;
  asm volatile("atom.acq_rel.sys.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
ARK_DEVICE ARK_FORCEINLINE bool compare_exchange(std::uint32_t* p, std::uint32_t expected,
                                                 std::uint32_t desired) {
  std::uint32_t old;
  asm volatile("atom.acq_rel.sys.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(p), "r"(expected), "r"(desired)
               : "memory");
  return old == expected;
}
ARK_DEVICE ARK_FORCEINLINE void fence() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
ARK_DEVICE ARK_FORCEINLINE std::uint64_t now_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
ARK_DEVICE ARK_FORCEINLINE void load_pair_volatile(const void* p, std::uint64_t& a, std::uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
ARK_DEVICE ARK_FORCEINLINE void store_pair_volatile(void* p, std::uint64_t a, std::uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
ARK_DEVICE ARK_FORCEINLINE std::uint64_t load_volatile(const void* p) {
  std::uint64_t a;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(a) : "l"(p) : "memory");
  return a;
}
/// Waits until the grids this one depends on (the stream's previous kernel, when this one was
/// launched early: runtime.hpp launch_early) have ended and their memory is visible; then
/// lets the stream's next early-launched kernel become resident. No-ops otherwise.
ARK_DEVICE ARK_FORCEINLINE void follow_previous_grid() {
#if __CUDA_ARCH__ >= 900 // older GPUs have no early launch (built_for_sm90), so nothing to wait for
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/// v, no longer known to the compiler as the kernel parameter it was read from. The memory
/// clobber of follow_previous_grid() makes code after it read a parameter again (and compute
/// again all that depends on it); it keeps an opaque copy in its register instead.
ARK_DEVICE ARK_FORCEINLINE std::uint64_t opaque(std::uint64_t v) {
  asm volatile("" : "+l"(v));
  return v;
}
ARK_DEVICE ARK_FORCEINLINE std::uint32_t opaque(std::uint32_t v) {
  asm volatile("" : "+r"(v));
  return v;
}
/// Computes v here, before any wait that follows (the compiler may not defer it).
ARK_DEVICE ARK_FORCEINLINE void compute_here(std::uint64_t v) { asm volatile("" ::"l"(v)); }

} // namespace ark::detail::gpu
