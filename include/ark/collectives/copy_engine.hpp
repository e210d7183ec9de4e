// ark/collectives/copy_engine.hpp: all-gather and broadcast moved by the copy engine alone.
//
// With an SM budget of zero (call_options::max_ctas = 0) no thread block moves data: one warp of
// each rank posts "copy my block into peer p's registered recv buffer, then raise p's flag" to
// the rank's engine queue (dma::proxy_engine) and waits; the copy engine (on the host: the proxy
// thread) does the rest. Protocol, on worker 0's channels, as one pipeline step `round`:
//
//   1. write our call description into each peer's header for the step, then raise its ack flag
//      to round + 1: "I am in this call; you may write into my recv buffer";
//   2. for each peer we send to: wait for its ack, check its call against ours, post the copy
//      with head := round + 1 raised by the engine once the bytes landed;
//   3. wait for the head flag of every peer we receive from; flush (our sources may be reused).
//
// Each rank's window (register_buffer) tells where its peers' recv buffers live.
#pragma once

#include "ark/dma/proxy_engine.hpp"
#include "ark/team/context.hpp"

namespace ark {

/// A user buffer registered on every rank: where each rank's copy lives in this address space.
/// Trivially copyable, so kernels can take it by value.
struct window_view {
  std::size_t bytes = 0;
  std::byte* base[max_world] = {};
};

namespace detail {

/// One call: `block` bytes from `src` go to offset `offset` of the recv window of every rank that
/// receives (all of them for an all-gather: root = -1; the others for a broadcast from root).
struct copy_engine_call {
  window_view out;
  const std::byte* src;
  std::size_t block;
  std::size_t offset; ///< where our block lands in a receiver's window
  int root;           ///< -1: all-gather
  bool local_copy;    ///< also copy src into our own window (not in place)
  call_desc desc;
};

template <class Ctx>
ARK_HD bool copy_engine_step(const Ctx& ctx, const copy_engine_call& c) {
  using P = typename Ctx::platform;
  using B = typename Ctx::backend;
  const std::uint64_t step = ctx.round;
  const int me = ctx.rank();
  auto sends_to = [&](int p) { return p != me && (c.root < 0 || me == c.root); };
  auto receives_from = [&](int p) { return p != me && (c.root < 0 || p == c.root); };
  bool ok = true;
  if (ctx.g.thread_rank() == 0) {
    for (int p = 0; p < ctx.world() && ok; ++p)
      if (receives_from(p)) {
        // p finished every earlier step from us (its previous call ended): the header slot is ours
        ok = ctx.wait_geq(ctx.lay().ack(ctx.local(), ctx.worker, p), step, wait_kind::credit, p);
        if (!ok) break;
        slot_header* h = ctx.lay().hdr(ctx.remote(p), ctx.worker, me, step);
        P::store_relaxed(&h->count, ctx.desc.count);
        P::store_relaxed(&h->meta, ctx.desc.meta);
        P::store_relaxed(&h->step, step);
        P::fence();
        P::store_release(ctx.lay().ack(ctx.remote(p), ctx.worker, me), step + 1);
      }
    for (int p = 0; p < ctx.world() && ok; ++p) {
      if (!sends_to(p)) continue;
      ok = ctx.wait_geq(ctx.lay().ack(ctx.local(), ctx.worker, p), step + 1, wait_kind::credit, p);
      if (!ok) break;
      const slot_header* h = ctx.lay().hdr(ctx.local(), ctx.worker, p, step);
      call_desc d;
      d.count = P::load_relaxed(&h->count);
      d.meta = P::load_relaxed(&h->meta);
      ok = ctx.check_peer_call(d, P::load_relaxed(&h->step), p, step) &&
           B::post(ctx, c.out.base[p] + c.offset, c.src, c.block, ctx.lay().head(ctx.remote(p), ctx.worker, me),
                   step + 1);
    }
    if (ok && c.local_copy && c.block) ok = B::post(ctx, c.out.base[me] + c.offset, c.src, c.block, nullptr, 0);
    for (int p = 0; p < ctx.world() && ok; ++p)
      if (receives_from(p))
        ok = ctx.wait_geq(ctx.lay().head(ctx.local(), ctx.worker, p), step + 1, wait_kind::data, p);
  }
  ok = !ctx.g.sync_any(!ok);
  // finish acknowledges the step on the channels it left unused (a broadcast's), so that later
  // calls never wait on them
  return ctx.finish(1) && ok;
}

} // namespace detail
} // namespace ark
