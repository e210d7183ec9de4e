// ark/dma/tma.hpp: DMA backend on the TMA bulk-copy unit of NVIDIA sm_90+ GPUs.
//
// An engine backend (direct = false) of the simple channel protocol: a pass reduces into local
// staging with the SM's threads, then one elected thread of the block moves the step to the
// peer's slot with bulk copies, global -> shared -> peer global, `Depth` chunks in flight, and
// raises the peer's flag once the last write completed. The threads do no per-byte work for the
// move, so the reduction of step k+1 overlaps the copy of step k only across blocks; within a
// block the copy is what the TMA unit pipelines.
//
// Hopper and newer only: the copies are the platform's (platform/bulk_copy.hpp, the instructions
// in platform/cuda/bulk_copy_sm90.hpp); any other target (host, HIP, sm_8x) gets a compile-time
// error naming the requirement. Shared memory: Depth chunks, 32 KB in all.
#pragma once

#include "ark/dma/simple_channel.hpp"
#include "ark/platform/bulk_copy.hpp"
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
  /// stores `value` there with release semantics. The copy has returned, so its writes completed,
  /// and the fence orders them before the flag: a peer that acquires the flag sees the data.
  /// Returns when done.
  template <class Ctx>
  ARK_HD static bool post(const Ctx&, void* dst, const void* src, std::size_t bytes, std::uint64_t* flag,
                          std::uint64_t value) {
    using P = typename Ctx::platform;
    static_assert(!std::is_same_v<P, platform::host>,
                  "ark::dma::tma drives the TMA unit of NVIDIA sm_90+ GPUs and has no host model; "
                  "on the host use dma::proxy_engine");
    ark::detail::bulk_copy::copy<Depth, chunk_bytes>(dst, src, bytes);
    if (flag) {
      P::fence();
      P::store_release(flag, value);
    }
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
  ARK_HD static void publish_staging() { ark::detail::bulk_copy::publish(); }

  /// Posts complete before they return.
  template <class Ctx>
  ARK_HD static bool flush(const Ctx&) {
    return true;
  }
};

} // namespace ark::dma
