// ark/dma/arch/sm90.hpp: the Hopper (sm_90) instructions dma::tma is made of, and nothing else.
//
// `cp.async.bulk` moves a contiguous run of bytes between global and shared memory on the SM's
// TMA unit: global -> shared completes on an mbarrier (transaction bytes), shared -> global
// (any global address, a peer's mapped memory included) completes as a bulk group. One thread
// issues; the copy itself costs the SM no instructions per byte.
//
// Only the device pass for sm_90 or newer defines these (`available` says whether it did); every
// other pass (host, HIP, older GPUs) sees the declarations of nothing, and dma::tma turns a use
// there into a compile-time error that names the requirement.
#pragma once

#include "ark/config.hpp"

#include <cstdint>

#if defined(ARK_COMPILER_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ARK_HAS_SM90_TMA 1
#endif

namespace ark::detail::sm90 {

#if defined(ARK_HAS_SM90_TMA)
__device__ inline std::uint32_t smem(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void mbarrier_init(std::uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(bar)) : "memory");
}
__device__ inline void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/// Orders this thread's (and, through a preceding barrier, its block's) ordinary memory accesses
/// with the bulk copies it issues afterwards, and the other way round.
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async;" ::: "memory"); }
/// Bulk copy global -> shared; completes `bytes` transaction bytes on `bar`.
__device__ inline void load(void* dst_smem, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(bar)), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem(dst_smem)),
      "l"(src), "r"(bytes), "r"(smem(bar))
      : "memory");
}
/// Waits until phase `parity` of `bar` completed (its load landed in shared memory).
__device__ inline void wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem(bar)), "r"(parity)
        : "memory");
}
/// Bulk copy shared -> global, as a bulk group of its own.
__device__ inline void store(void* dst, const void* src_smem, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem(src_smem)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/// Waits until at most N bulk groups still read their shared memory.
template <int N>
__device__ inline void wait_reads() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/// Waits until every bulk group has completed its writes.
__device__ inline void wait_writes() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
#endif

} // namespace ark::detail::sm90
