// ark/dma/tma.hpp: DMA backend on the TMA bulk-copy unit of NVIDIA sm_90+ GPUs.
//
// An engine backend (direct = false) of the simple channel protocol: a pass reduces into local
// staging with the SM's threads, then one elected thread of the block moves the step to the
// peer's slot with bulk copies, global -> shared -> peer global, `Depth` chunks in flight, and
// raises the peer's flag once the last write completed. The threads do no per-byte work for the
// move, so the reduction of step k+1 overlaps the copy of step k only across blocks; within a
// block the copy is what the TMA unit pipelines.
//
// Hopper only: the device code is in arch/sm90.hpp; any other target (host, HIP, sm_8x) gets a
// compile-time error naming the requirement. Shared memory: Depth chunks, 32 KB in all.
#pragma once

#include "ark/dma/arch/sm90.hpp"
#include "ark/dma/simple_channel.hpp"
#include "ark/platform/host.hpp"

#include <type_traits>

namespace ark::dma {

template <unsigned Depth>
struct tma : simple_channel<tma<Depth>> {
  static_assert(Depth >= 1 && Depth <= 16, "tma: pipeline depth must be in [1, 16]");
  using dma_concept = backend_tag;
  static constexpr unsigned depth = Depth;
  static constexpr bool direct = false;
  static constexpr std::uint8_t id = 4;
  /// Bytes per bulk copy: Depth of them fill 32 KB of shared memory, at most 16 KB each.
  static constexpr std::uint32_t chunk_bytes = (32768 / Depth > 16384 ? 16384 : 32768 / Depth) / 16 * 16;

  /// One thread: copies `bytes` src -> dst (dst may be a peer's memory), then, if flag is set,
  /// stores `value` there with release semantics once the data is visible. Returns when done.
  template <class Ctx>
  ARK_HD static bool post(const Ctx&, void* dst, const void* src, std::size_t bytes, std::uint64_t* flag,
                          std::uint64_t value) {
    using P = typename Ctx::platform;
    static_assert(!std::is_same_v<P, platform::host>,
                  "ark::dma::tma drives the TMA unit of NVIDIA sm_90+ GPUs and has no host model; "
                  "on the host use dma::proxy_engine");
#if defined(ARK_DEVICE_PASS)
#if defined(ARK_HAS_SM90_TMA)
    copy(dst, src, bytes);
    if (flag) {
      P::fence();
      P::store_release(flag, value);
    }
#else
    static_assert(sizeof(Ctx) == 0, "ark::dma::tma needs NVIDIA sm_90 or newer: compile with -arch=sm_90");
#endif
#else
    (void)dst, (void)src, (void)bytes, (void)flag, (void)value;
#endif
    return true;
  }

  template <class Ctx>
  ARK_HD static bool put(const Ctx& ctx, void* dst, const void* src, std::size_t bytes) {
    ctx.g.sync();
    if (ctx.g.thread_rank() == 0) post(ctx, dst, src, bytes, nullptr, 0);
    ctx.g.sync();
    return true;
  }

  template <class Ctx>
  ARK_HD static void signal(const Ctx& ctx, std::uint64_t* flag, std::uint64_t value) {
    fenced_signal(ctx, flag, value);
  }

  template <class Ctx>
  ARK_HD static bool wait(const Ctx& ctx, const std::uint64_t* flag, std::uint64_t value, wait_kind kind,
                          int peer) {
    return wait_flag(ctx, flag, value, kind, peer);
  }

  /// Every thread, after writing staging and before the barrier that precedes a post: orders its
  /// ordinary stores before the bulk loads (the TMA unit reads through the async proxy).
  ARK_HD static void publish_staging() {
#if defined(ARK_HAS_SM90_TMA)
    ark::detail::sm90::fence_proxy_async();
#endif
  }

  /// Posts complete before they return.
  template <class Ctx>
  ARK_HD static bool flush(const Ctx&) {
    return true;
  }

#if defined(ARK_HAS_SM90_TMA)
private:
  /// One thread: the bulk part through shared memory, Depth stores in flight and the next load
  /// issued as soon as its buffer is free; a tail under 16 bytes (or a misaligned copy) by hand.
  __device__ static void copy(void* dst, const void* src, std::size_t bytes) {
    __shared__ alignas(128) std::byte buf[Depth][chunk_bytes];
    __shared__ std::uint64_t bars[Depth];
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    const bool aligned =
        ((reinterpret_cast<std::uintptr_t>(d) | reinterpret_cast<std::uintptr_t>(s)) & 15) == 0;
    const std::size_t bulk = aligned ? bytes / 16 * 16 : 0;
    const std::size_t n = div_up(bulk, chunk_bytes);
    auto size = [&](std::size_t i) {
      return static_cast<std::uint32_t>(min_of<std::size_t>(chunk_bytes, bulk - i * chunk_bytes));
    };
    if (n) {
      for (unsigned k = 0; k < Depth; ++k) ark::detail::sm90::mbarrier_init(&bars[k]);
      ark::detail::sm90::fence_mbarrier_init();
      ark::detail::sm90::fence_proxy_async(); // the block's stores into staging, before the bulk loads
      ark::detail::sm90::load(buf[0], s, size(0), &bars[0]);
      for (std::size_t i = 0; i < n; ++i) {
        const unsigned b = static_cast<unsigned>(i % Depth);
        ark::detail::sm90::wait(&bars[b], static_cast<std::uint32_t>((i / Depth) & 1));
        ark::detail::sm90::store(d + i * chunk_bytes, buf[b], size(i));
        if (i + 1 < n) {
          // buffer (i + 1) % Depth was last read by store i + 1 - Depth: at most Depth - 1 pending
          ark::detail::sm90::wait_reads<Depth - 1>();
          ark::detail::sm90::load(buf[(i + 1) % Depth], s + (i + 1) * chunk_bytes, size(i + 1),
                                  &bars[(i + 1) % Depth]);
        }
      }
      ark::detail::sm90::wait_writes();
      ark::detail::sm90::fence_proxy_async();
    }
    for (std::size_t i = bulk; i < bytes; ++i) d[i] = s[i];
  }
#endif
};

} // namespace ark::dma
