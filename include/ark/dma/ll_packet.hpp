// ark/dma/ll_packet.hpp: LL ("low latency") packets. Every 16-byte packet carries 8 data bytes and,
// in each 8-byte half, the 32-bit flag of its pipeline step; a half is stored and loaded as one
// single-copy-atomic word. The receiver polls the packets themselves, so a step needs no separate
// flag and no fence: small messages cost one one-way trip instead of two. Half the bytes on the
// wire are flags, so this pays for small messages only.
//
// Slot format: 2 header packets (the 16-byte call description), then one packet per 8 data bytes.
#pragma once

#include "ark/dma/thread_copy.hpp"

namespace ark::dma {

namespace detail {
ARK_HD inline std::uint32_t ll_flag(std::uint64_t step) { return static_cast<std::uint32_t>(step + 1); }
ARK_HD inline std::uint64_t ll_half(std::uint32_t data, std::uint32_t flag) {
  return std::uint64_t(data) | std::uint64_t(flag) << 32;
}
/// The 8 data bytes of a packet whose halves are a (low data word) and b (high).
ARK_HD inline std::uint64_t ll_data(std::uint64_t a, std::uint64_t b) {
  return (a & 0xffffffffu) | (b << 32);
}
} // namespace detail

/// Stores 8-byte units of a step as packets into a peer's LL slot.
template <class P>
struct ll_writer {
  std::uint64_t* packets; // the slot, header included
  std::uint32_t flag;
  ARK_HD void store(std::size_t i, const vec<8>& v) const { store_raw(i + 2, v.w[0]); }
  /// Packet k of the slot (0 and 1: the header) carries d.
  ARK_HD void store_raw(std::size_t k, std::uint64_t d) const {
    P::store_ll(packets + 2 * k, detail::ll_half(static_cast<std::uint32_t>(d), flag),
                detail::ll_half(static_cast<std::uint32_t>(d >> 32), flag));
  }
};

/// Polls 8-byte units of a step out of our LL slot; fails after the context's timeout.
template <class P>
struct ll_reader {
  const std::uint64_t* packets;
  std::uint32_t flag;
  int peer;

  template <class Ctx>
  ARK_HD bool load(const Ctx& ctx, std::size_t i, vec<8>& v) const {
    std::uint64_t a, b;
    if (!poll(ctx, packets + 2 * (i + 2), a, b)) return false;
    v.w[0] = detail::ll_data(a, b);
    return true;
  }

  /// Polls packet i (if `data`) and the two header packets (if `header`, decoding them into
  /// `theirs`) in the same sweeps: one wait, however they land. Returns as soon as the header
  /// describes a call other than ours, whose packet i may never come (then v is unspecified:
  /// check `theirs` first). One loop whatever the predicates, so that the lanes of a warp that
  /// poll a header and those that do not poll together: separate loops made a warp run them one
  /// after the other, a memory round trip more per call (docs/perf.md, ll_anatomy).
  template <class Ctx>
  ARK_HD bool load_joint(const Ctx& ctx, bool data, std::size_t i, vec<8>& v, bool header,
                         call_desc& theirs) const {
    const std::uint64_t* pk = packets + 2 * (i + 2);
    std::uint64_t a = 0, b = 0, c = 0, d = 0, e = 0, f = 0, x, y;
    wait_clock clock;
    for (unsigned spins = 0;; ++spins) {
      if (header) {
        P::load_ll(packets, a, b);
        P::load_ll(packets + 2, c, d);
      }
      if (data) P::load_ll(pk, e, f);
      const bool got = !data || ready(e, f);
      if (header && ready(a, b) && ready(c, d)) {
        theirs.count = detail::ll_data(a, b);
        theirs.meta = detail::ll_data(c, d);
        if (ctx.desc.first_difference(theirs, x, y) != desc_field::none) break;
        header = false; // ours: not loaded again
      }
      if (!header && got) break;
      P::pause(spins);
      if ((spins & 63u) == 63u &&
          !ctx.keep_waiting(clock, wait_kind::data, peer, flag, (data && !got ? e : a) >> 32))
        return false;
    }
    if (data) v.w[0] = detail::ll_data(e, f);
    return true;
  }

  /// Polls the header packets and decodes them.
  template <class Ctx>
  ARK_HD bool header(const Ctx& ctx, call_desc& theirs) const {
    std::uint64_t a, b, c, d;
    P::load_ll(packets, a, b); // both header packets in flight at once
    P::load_ll(packets + 2, c, d);
    if ((!ready(a, b) && !poll(ctx, packets, a, b)) || (!ready(c, d) && !poll(ctx, packets + 2, c, d)))
      return false;
    theirs.count = detail::ll_data(a, b);
    theirs.meta = detail::ll_data(c, d);
    return true;
  }

  template <class Ctx>
  ARK_HD bool poll(const Ctx& ctx, const std::uint64_t* pk, std::uint64_t& a, std::uint64_t& b) const {
    P::load_ll(pk, a, b);
    if (ready(a, b)) return true;
    wait_clock clock;
    for (unsigned spins = 0;; ++spins) {
      P::pause(spins);
      P::load_ll(pk, a, b);
      if (ready(a, b)) return true;
      if ((spins & 63u) == 63u && !ctx.keep_waiting(clock, wait_kind::data, peer, flag, a >> 32))
        return false;
    }
  }

  ARK_HD bool ready(std::uint64_t a, std::uint64_t b) const {
    return static_cast<std::uint32_t>(a >> 32) == flag && static_cast<std::uint32_t>(b >> 32) == flag;
  }
};

template <unsigned Depth>
struct ll_packet : thread_transfers<Depth> {
  static constexpr std::uint8_t id = 2;
  static constexpr bool ll = true;
  static constexpr std::size_t vec_bytes = 8;

  template <class Ctx>
  ARK_HD static ll_writer<typename Ctx::platform> tx(const Ctx& ctx, int peer, std::uint64_t step) {
    return {ctx.lay().ll(ctx.remote(peer), ctx.worker, ctx.rank(), step), detail::ll_flag(step)};
  }

  template <class Ctx>
  ARK_HD static ll_reader<typename Ctx::platform> rx(const Ctx& ctx, int peer, std::uint64_t step) {
    return {ctx.lay().ll(ctx.local(), ctx.worker, peer, step), detail::ll_flag(step), peer};
  }

  /// Waits for the slot to be free, then writes the header packets.
  template <class Ctx>
  ARK_HD static bool open_send(const Ctx& ctx, peers ps, std::uint64_t step) {
    const bool ok = for_each_peer(ctx, ps, [&](int p) {
      if (!wait_credit(ctx, p, step, Depth)) return false;
      write_header(ctx, p, step);
      return true;
    });
    return !ctx.g.sync_any(!ok);
  }

  /// One thread: writes the header packets (our call's description) of `step` into peer p's slot.
  template <class Ctx>
  ARK_HD static void write_header(const Ctx& ctx, int p, std::uint64_t step) {
    const ll_writer<typename Ctx::platform> w = tx(ctx, p, step);
    w.store_raw(0, ctx.desc.count);
    w.store_raw(1, ctx.desc.meta);
  }

  /// Packets announce themselves: nothing to do.
  template <class Ctx>
  ARK_HD static bool close_send(const Ctx&, peers, std::uint64_t, std::size_t) {
    return true;
  }

  template <class Ctx>
  ARK_HD static bool send(const Ctx& ctx, peers ps, std::uint64_t step, const void* src, std::size_t bytes) {
    using P = typename Ctx::platform;
    if (!open_send(ctx, ps, step)) return false;
    const auto* s = static_cast<const std::byte*>(src);
    const std::size_t nv = div_up(bytes, 8);
    for (std::size_t i = ctx.g.thread_rank(); i < nv; i += ctx.g.size()) {
      const vec<8> v = load_prefix<P, 8>(s + 8 * i, bytes - 8 * i);
      if (ps.one >= 0) {
        tx(ctx, ps.one, step).store(i, v);
      } else {
        for (int p = 0; p < ctx.world(); ++p)
          if (p != ctx.rank()) tx(ctx, p, step).store(i, v);
      }
    }
    return true;
  }

  /// Polls the header packets of every addressed peer and checks the call they describe.
  template <class Ctx>
  ARK_HD static bool open_recv(const Ctx& ctx, peers ps, std::uint64_t step) {
    // refused after the wait, as wait_credit does: the step is a failed call's
    const bool ok =
        for_each_peer(ctx, ps, [&](int p) { return check_header(ctx, p, step) && !ctx.failed_before; });
    return !ctx.g.sync_any(!ok);
  }

  /// One thread: polls peer p's header packets of `step` and checks the call they describe.
  template <class Ctx>
  ARK_HD static bool check_header(const Ctx& ctx, int p, std::uint64_t step) {
    call_desc theirs;
    return rx(ctx, p, step).header(ctx, theirs) && ctx.check_peer_call(theirs, step, p, step);
  }

  template <class Ctx>
  ARK_HD static void close_recv(const Ctx& ctx, peers ps, std::uint64_t step) {
    acknowledge(ctx, ps, step);
  }
};

} // namespace ark::dma
