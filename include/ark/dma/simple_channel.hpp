// ark/dma/simple_channel.hpp: the "simple" channel protocol, built on put/signal/wait.
//
// A sender waits until the receiver finished step - Depth - 1 (the slot is free), moves the
// payload into the receiver's slot, writes the slot's header (call description and step), and
// raises the receiver's head flag to step + 1. The receiver waits for head >= step + 1, checks the
// header, reads the payload and raises the sender's ack flag to step + 1. Flags only grow, so
// nothing is ever reset between calls.
//
// Backends that let threads store into peer memory (`direct`) write the payload straight into
// the receiver's slot. Engine backends write it into a local staging slot and post a copy.
#pragma once

#include "ark/dma/common.hpp"

namespace ark::dma {

/// Per-thread view a pass stores step payload through (a peer's slot, or local staging).
template <class P>
struct slot_writer {
  std::byte* p;
  template <std::size_t V>
  ARK_HD void store(std::size_t i, const vec<V>& v) const {
    P::template store<V>(p + i * V, v);
  }
};

/// Per-thread view a pass loads received payload through.
template <class P>
struct slot_reader {
  const std::byte* p;
  template <class Ctx, std::size_t V>
  ARK_HD bool load(const Ctx&, std::size_t i, vec<V>& v) const {
    v = P::template load_peer<V>(p + i * V);
    return true;
  }
};

template <class B>
struct simple_channel {
  static constexpr bool ll = false;
  static constexpr std::size_t vec_bytes = 16;

  template <class Ctx>
  ARK_HD static slot_writer<typename Ctx::platform> tx(const Ctx& ctx, int peer, std::uint64_t step) {
    if constexpr (B::direct)
      return {ctx.lay().data(ctx.remote(peer), ctx.out_link(peer), step)};
    else
      return {ctx.lay().stage(ctx.local(), ctx.in_link(peer), step)};
  }

  template <class Ctx>
  ARK_HD static slot_reader<typename Ctx::platform> rx(const Ctx& ctx, int peer, std::uint64_t step) {
    return {ctx.lay().data(ctx.local(), ctx.in_link(peer), step)};
  }

  /// Waits until every addressed peer finished step - Depth - 1.
  template <class Ctx>
  ARK_HD static bool open_send(const Ctx& ctx, peers ps, std::uint64_t step) {
    const bool ok = for_each_peer(ctx, ps, [&](int p) { return wait_credit(ctx, p, step, B::depth); });
    return !ctx.g.sync_any(!ok);
  }

  /// Announces `bytes` of payload that a pass wrote through tx views for `step`.
  template <class Ctx>
  ARK_HD static bool close_send(const Ctx& ctx, peers ps, std::uint64_t step, std::size_t bytes) {
    if constexpr (requires { B::publish_staging(); })
      B::publish_staging(); // every thread: its staging stores, before an engine reads them
    ctx.g.sync();
    if constexpr (B::direct) {
      for_each_peer(ctx, ps, [&](int p) {
        announce(ctx, p, step);
        return true;
      });
      return true;
    } else {
      bool ok = true;
      if (ctx.g.thread_rank() == 0)
        ok = each_peer_in_order(ctx, ps, [&](int p) {
          return post_step(ctx, p, step, ctx.lay().stage(ctx.local(), ctx.in_link(p), step), bytes);
        });
      return !ctx.g.sync_any(!ok);
    }
  }

  /// Moves `bytes` of local memory into the addressed peers' slot for `step` and announces it.
  /// Whether the engine of an engine backend copies only from staging slots (their addresses
  /// fixed in advance), so that a send from any other memory is staged by the threads first. A
  /// backend that does says so by hiding this.
  template <class Ctx>
  ARK_HD static bool copies_only_slots(const Ctx&) {
    return false;
  }

  template <class Ctx>
  ARK_HD static bool send(const Ctx& ctx, peers ps, std::uint64_t step, const void* src, std::size_t bytes) {
    using P = typename Ctx::platform;
    if (!open_send(ctx, ps, step)) return false;
    if constexpr (B::direct) {
      const auto* s = static_cast<const std::byte*>(src);
      const std::size_t nv = div_up(bytes, 16);
      for (std::size_t i = ctx.g.thread_rank(); i < nv; i += ctx.g.size()) {
        const vec<16> v = load_prefix<P, 16>(s + 16 * i, bytes - 16 * i);
        each_peer_in_order(ctx, ps, [&](int p) {
          P::template store<16>(ctx.lay().data(ctx.remote(p), ctx.out_link(p), step) + 16 * i, v);
          return true;
        });
      }
      return close_send(ctx, ps, step, bytes);
    } else {
      if (B::copies_only_slots(ctx)) { // the engine copies staging slots alone: stage first
        each_peer_in_order(ctx, ps, [&](int p) {
          group_copy(ctx, ctx.lay().stage(ctx.local(), ctx.in_link(p), step), src, bytes);
          return true;
        });
        return close_send(ctx, ps, step, bytes);
      }
      bool ok = true;
      if (ctx.g.thread_rank() == 0)
        ok = each_peer_in_order(ctx, ps, [&](int p) { return post_step(ctx, p, step, src, bytes); });
      return !ctx.g.sync_any(!ok);
    }
  }

  /// Waits until every addressed peer announced `step`, and checks that its call matches ours.
  template <class Ctx>
  ARK_HD static bool open_recv(const Ctx& ctx, peers ps, std::uint64_t step) {
    using P = typename Ctx::platform;
    const bool ok = for_each_peer(ctx, ps, [&](int p) {
      // refused after the wait, as wait_credit does: the step is a failed call's
      if (!ctx.wait_geq(ctx.lay().head(ctx.local(), ctx.in_link(p)), step + 1, wait_kind::data, p) ||
          ctx.failed_before)
        return false;
      const slot_header* h = ctx.lay().hdr(ctx.local(), ctx.in_link(p), step);
      call_desc d;
      d.count = P::load_relaxed(&h->count);
      d.meta = P::load_relaxed(&h->meta);
      return ctx.check_peer_call(d, P::load_relaxed(&h->step), p, step);
    });
    return !ctx.g.sync_any(!ok);
  }

  /// Tells the addressed peers that their slot for `step` may be reused.
  template <class Ctx>
  ARK_HD static void close_recv(const Ctx& ctx, peers ps, std::uint64_t step) {
    acknowledge(ctx, ps, step);
  }

private:
  /// Runs f(peer) for each addressed peer, in this thread, in rank order.
  template <class Ctx, class F>
  ARK_HD static bool each_peer_in_order(const Ctx& ctx, peers ps, F&& f) {
    if (ps.one >= 0) return f(ps.one);
    for (int p = 0; p < ctx.world(); ++p)
      if (p != ctx.rank() && !f(p)) return false;
    return true;
  }

  template <class Ctx>
  ARK_HD static void write_header(const Ctx& ctx, int p, std::uint64_t step) {
    using P = typename Ctx::platform;
    slot_header* h = ctx.lay().hdr(ctx.remote(p), ctx.out_link(p), step);
    P::store_relaxed(&h->count, ctx.desc.count);
    P::store_relaxed(&h->meta, ctx.desc.meta);
    P::store_relaxed(&h->step, step);
  }

  /// Direct backends: header, then a system fence over the scope's payload stores, then head.
  template <class Ctx>
  ARK_HD static void announce(const Ctx& ctx, int p, std::uint64_t step) {
    using P = typename Ctx::platform;
    write_header(ctx, p, step);
    P::fence();
    P::store_release(ctx.lay().head(ctx.remote(p), ctx.out_link(p)), step + 1);
  }

  /// Engine backends (one thread): header, then a posted copy that raises head when it lands.
  template <class Ctx>
  ARK_HD static bool post_step(const Ctx& ctx, int p, std::uint64_t step, const void* src,
                               std::size_t bytes) {
    write_header(ctx, p, step);
    return B::post(ctx, ctx.lay().data(ctx.remote(p), ctx.out_link(p), step), src, bytes,
                   ctx.lay().head(ctx.remote(p), ctx.out_link(p)), step + 1);
  }
};

} // namespace ark::dma
