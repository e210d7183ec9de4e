// ark/platform/gpu_atomics.hpp: system-scope atomics, clocks and vector accesses in device code,
// spelled once in PTX (CUDA) and once with clang's scoped atomic builtins (HIP). In the host pass
// the same functions fall back to the host platform's.
#pragma once

#include "ark/core/vec.hpp"
#include "ark/platform/gpu_runtime.hpp"
#include "ark/platform/host.hpp"

#include <cstdint>

namespace ark::detail::gpu {

#if defined(ARK_DEVICE_PASS) && defined(ARK_COMPILER_CUDA)
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
/// launched early: gpu_runtime.hpp launch_early) have ended and their memory is visible; then
/// lets the stream's next early-launched kernel become resident. No-ops otherwise.
ARK_DEVICE ARK_FORCEINLINE void follow_previous_grid() {
#if __CUDA_ARCH__ >= 900
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
#elif defined(ARK_DEVICE_PASS) && defined(ARK_COMPILER_HIP)
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
#endif

} // namespace ark::detail::gpu
