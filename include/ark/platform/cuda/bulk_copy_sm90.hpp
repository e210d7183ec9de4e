// ark/platform/cuda/bulk_copy_sm90.hpp: bulk copies on the TMA unit of NVIDIA sm_90 and newer
// (ark::detail::bulk_copy), what dma::tma is made of.
//
// `cp.async.bulk` moves a contiguous run of bytes between global and shared memory on the SM's
// TMA unit: global -> shared completes on an mbarrier (transaction bytes), shared -> global
// (any global address, a peer's mapped memory included) completes as a bulk group. One thread
// issues; the copy itself costs the SM no instructions per byte.
//
// platform/bulk_copy.hpp includes this file in nvcc's device pass for sm_90 or newer only, and
// gives every other pass the same two names, as a compile-time error (other device passes) or
// nothing (host passes).
#pragma once

#include "ark/config.hpp"

#include <cstddef>
#include <cstdint>

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
#error "ark/platform/cuda/bulk_copy_sm90.hpp is sm_90 device code: platform/bulk_copy.hpp includes it"
#endif

namespace ark::detail::bulk_copy {

namespace sm90 {
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
} // namespace sm90

/// Every thread of the block, after its ordinary stores into memory a later copy() reads and
/// before the block barrier that precedes that copy: the TMA unit reads through the async proxy,
/// which ordinary stores are not ordered with otherwise.
__device__ inline void publish() { sm90::fence_proxy_async(); }

/// One thread: copies `bytes` src -> dst (dst may be a peer's memory) and returns once the
/// writes completed. The bulk part goes through Depth shared-memory buffers of ChunkBytes each
/// (one set per <Depth, ChunkBytes>, in the block's shared memory): Depth stores in flight, the
/// next load issued as soon as its buffer is free. A tail under 16 bytes, or a copy whose ends
/// are not 16-byte aligned, is copied by this thread's own loads and stores.
template <unsigned Depth, std::uint32_t ChunkBytes>
__device__ void copy(void* dst, const void* src, std::size_t bytes) {
  static_assert(Depth >= 1 && ChunkBytes % 16 == 0 && ChunkBytes > 0, "bulk copies move 16-byte multiples");
  __shared__ alignas(128) std::byte buf[Depth][ChunkBytes];
  __shared__ std::uint64_t bars[Depth];
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const bool aligned =
      ((reinterpret_cast<std::uintptr_t>(d) | reinterpret_cast<std::uintptr_t>(s)) & 15) == 0;
  const std::size_t bulk = aligned ? bytes / 16 * 16 : 0;
  const std::size_t n = (bulk + ChunkBytes - 1) / ChunkBytes;
  auto size = [&](std::size_t i) {
    const std::size_t left = bulk - i * ChunkBytes;
    return static_cast<std::uint32_t>(left < ChunkBytes ? left : ChunkBytes);
  };
  if (n) {
    for (unsigned k = 0; k < Depth; ++k) sm90::mbarrier_init(&bars[k]);
    sm90::fence_mbarrier_init();
    sm90::fence_proxy_async(); // the block's stores into the source, before the bulk loads
    sm90::load(buf[0], s, size(0), &bars[0]);
    for (std::size_t i = 0; i < n; ++i) {
      // load i sits in buffer i % Depth, phase (i / Depth) & 1 of its barrier
      const unsigned b = static_cast<unsigned>(i % Depth);
      sm90::wait(&bars[b], static_cast<std::uint32_t>((i / Depth) & 1));
      sm90::store(d + i * ChunkBytes, buf[b], size(i));
      if (i + 1 < n) {
        // buffer (i + 1) % Depth was last read by store i + 1 - Depth: at most Depth - 1 pending
        sm90::wait_reads<Depth - 1>();
        sm90::load(buf[(i + 1) % Depth], s + (i + 1) * ChunkBytes, size(i + 1), &bars[(i + 1) % Depth]);
      }
    }
    sm90::wait_writes();
    sm90::fence_proxy_async(); // the bulk writes, before this thread's later stores (the flag)
  }
  for (std::size_t i = bulk; i < bytes; ++i) d[i] = s[i];
}

} // namespace ark::detail::bulk_copy
