// ark/concepts/dma_backend.hpp: how bytes move from a rank's memory to a peer's.
//
// A DMA backend B is a stateless type whose static member functions are called by every thread of
// a scope (they are scope-collective) with a context `ctx` (ark/team/context.hpp). It declares
// `using dma_concept = ark::dma::backend_tag;` and provides:
//
//   1. `depth`: requests in flight per worker, a compile-time constant >= 1 (the pipeline depth);
//      `vec_bytes` (8 or 16): the unit its passes move; `ll`: whether it uses LL packets;
//      `id`: a small number ranks compare.
//   2. Raw transfers on registered memory:
//        put(ctx, remote_dst, local_src, bytes) -> bool   post a transfer (may return before it is done)
//        signal(ctx, remote_flag, value)                  set a peer's flag once earlier puts are visible
//        wait(ctx, local_flag, value, kind, peer) -> bool bounded wait for flag >= value
//        flush(ctx) -> bool                               local sources of earlier puts may be reused
//   3. Channels: each (worker, sender, receiver) has max_depth + 1 pipeline slots; step k uses
//      slot k % slots. A sender sends step k once the receiver finished step k - Depth - 1: it runs
//      at most Depth steps ahead, and a rank that receives step k while sending step k + 1 to the
//      same peer (a fused exchange) never waits on itself.
//        send(ctx, peers, step, src, bytes) -> bool  move local bytes into the peers' slot and announce it
//        open_send(ctx, peers, step) -> bool         wait until the peers' slot for `step` is free
//        close_send(ctx, peers, step, bytes) -> bool announce what a pass wrote through tx views
//        open_recv(ctx, peers, step) -> bool         wait for the step and check the sender's call
//        close_recv(ctx, peers, step)                acknowledge: the slot may be reused
//        tx(ctx, peer, step) / rx(ctx, peer, step)   per-thread views a pass stores to / loads from,
//        whose store(i, v) and load(ctx, i, v) move vec<vec_bytes> number i of the step's payload.
//
// The concept is checked against an archetype context (detail::archetype_context), so it knows
// none of its models. Models: dma::thread_copy (threads store 16-byte vectors into peer memory),
// dma::ll_packet (data and flag in one store; the receiver polls the data itself), dma::proxy_engine (a
// thread per rank drains a request queue: the software model of a GPU-driven DMA engine).
#pragma once

#include "ark/concepts/scope.hpp"
#include "ark/core/error.hpp"
#include "ark/core/vec.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ark {
namespace dma {

/// Tag a DMA backend names as `using dma_concept = ark::dma::backend_tag;`.
struct backend_tag {};

/// The peers a channel operation addresses: one rank, or every rank but ourselves.
struct peers {
  int one = -1;
  ARK_HD static peers all() { return {-1}; }
  ARK_HD static peers only(int p) { return {p}; }
};

} // namespace dma

namespace detail {
/// The concept's stand-in for a call's context (team/context.hpp): backends are templates of
/// their context, and the concept asks only that their operations can be called with one. Its
/// platform is named, never used (checking a call instantiates no backend's body).
struct archetype_platform {};
struct archetype_context {
  using platform = archetype_platform;
  single_thread_scope g;
};
} // namespace detail

template <class B>
concept dma_backend =
    std::same_as<typename B::dma_concept, dma::backend_tag> &&(B::depth >= 1) &&
    (B::vec_bytes == 8 || B::vec_bytes == 16) &&
    std::is_same_v<decltype(B::ll), const bool>&& std::is_same_v<
        decltype(B::id), const std::uint8_t>&& requires(const detail::archetype_context& ctx, void* p,
                                                        const void* cp, std::size_t n, std::uint64_t* f,
                                                        const std::uint64_t* cf, std::uint64_t v,
                                                        dma::peers ps, vec<B::vec_bytes>& x) {
  { B::put(ctx, p, cp, n) } -> std::same_as<bool>;
  { B::signal(ctx, f, v) } -> std::same_as<void>;
  { B::wait(ctx, cf, v, wait_kind::flag, 0) } -> std::same_as<bool>;
  { B::flush(ctx) } -> std::same_as<bool>;
  { B::send(ctx, ps, v, cp, n) } -> std::same_as<bool>;
  { B::open_send(ctx, ps, v) } -> std::same_as<bool>;
  { B::close_send(ctx, ps, v, n) } -> std::same_as<bool>;
  { B::open_recv(ctx, ps, v) } -> std::same_as<bool>;
  { B::close_recv(ctx, ps, v) } -> std::same_as<void>;
  { B::tx(ctx, 0, v).store(n, x) } -> std::same_as<void>;
  { B::rx(ctx, 0, v).load(ctx, n, x) } -> std::same_as<bool>;
};

} // namespace ark
