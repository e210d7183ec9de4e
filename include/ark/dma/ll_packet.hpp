// ark/dma/ll_packet.hpp: LL ("low latency") packets. Every 16-byte packet carries 8 data bytes and,
// in each 8-byte half, a 32-bit flag; a half is stored and loaded as one single-copy-atomic word.
// The receiver polls the packets themselves, so a step needs no separate flag and no fence: small
// messages cost one one-way trip instead of two. Half the bytes on the wire are flags, so this
// pays for small messages only.
//
// Slot format: 2 header packets (the 16-byte call description), then one packet per 8 data bytes.
// A header packet carries the flag of its pipeline step in both halves. A data packet carries it
// in its first half, and in its second that flag xor the tag of the call that sent it
// (call_desc::tag): a receiver that finds both as it expects has this step's packet of a call
// like its own, and needs no header to know it. The header is read only when a packet is late,
// to name a mismatch (ll_reader::poll); the pipelined path still checks it first (open_recv).
// What the tag costs. A half is single-copy atomic, a packet is not (HIP stores and loads its
// halves as two words; CUDA's 16-byte accesses are atomic only per 8 bytes; the host backend uses
// two words): a reader may see a fresh first half with a stale second one. Without the tag, that
// stale half would always carry another flag; with it, if it comes from another call, it carries
// the same one with odds of 2^-32 (call_desc::tag is mixed so that nearby steps and counts follow
// no pattern that meets). A packet from this step of a call that differs from ours in anything
// but a count that fits 32 bits passes with the same odds, per pair of calls. Either would give a
// wrong result where the header check gives an error.
#pragma once

#include "ark/dma/thread_copy.hpp"

namespace ark::dma {

namespace detail {
/// Packets of the call description at the start of every slot; data packet i is packet i + 2.
inline constexpr std::size_t ll_header_packets = 2;
ARK_HD inline std::uint32_t ll_flag(std::uint64_t step) { return static_cast<std::uint32_t>(step + 1); }
/// A data packet's second half: the flag xor the call's tag and the flag's upper bits, so that a
/// packet left 2^32 steps earlier in a slot does not pass for this step's.
ARK_HD inline std::uint32_t ll_tagged(std::uint64_t step, std::uint32_t tag) {
  return ll_flag(step) ^ tag ^ static_cast<std::uint32_t>((step + 1) >> 32) * 0x9E3779B9u;
}
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
  std::uint32_t flag;     // the step's
  std::uint32_t tagged;   // flag ^ the call's tag: the second half of a data packet
  ARK_HD void store(std::size_t i, const vec<8>& v) const {
    put(i + detail::ll_header_packets, v.w[0], tagged);
  }
  /// Header packet k (0 or 1) carries d.
  ARK_HD void store_header(std::size_t k, std::uint64_t d) const { put(k, d, flag); }
  ARK_HD void put(std::size_t k, std::uint64_t d, std::uint32_t second) const {
    P::store_ll(packets + 2 * k, detail::ll_half(static_cast<std::uint32_t>(d), flag),
                detail::ll_half(static_cast<std::uint32_t>(d >> 32), second));
  }
};

/// Polls 8-byte units of a step out of our LL slot; fails after the context's timeout, or as
/// soon as the header of a late step describes a call other than ours.
template <class P>
struct ll_reader {
  const std::uint64_t* packets;
  std::uint32_t flag, tagged;
  int peer;
  std::uint64_t step;

  template <class Ctx>
  ARK_HD bool load(const Ctx& ctx, std::size_t i, vec<8>& v) const {
    std::uint64_t a, b;
    if (!poll(ctx, packets + 2 * (i + detail::ll_header_packets), tagged, a, b)) return false;
    v.w[0] = detail::ll_data(a, b);
    return true;
  }

  /// Polls the header packets and decodes them.
  template <class Ctx>
  ARK_HD bool header(const Ctx& ctx, call_desc& theirs) const {
    if (arrived_header(theirs)) return true;
    std::uint64_t a, b, c, d;
    if (!poll(ctx, packets, flag, a, b) || !poll(ctx, packets + 2, flag, c, d)) return false;
    theirs = {detail::ll_data(a, b), detail::ll_data(c, d)};
    return true;
  }

  /// Whether both header packets of our step have come (then decoded into theirs): one look,
  /// both packets in flight at once.
  ARK_HD bool arrived_header(call_desc& theirs) const {
    std::uint64_t a, b, c, d;
    P::load_ll(packets, a, b);
    P::load_ll(packets + 2, c, d);
    if (!ready(a, b, flag) || !ready(c, d, flag)) return false;
    theirs = {detail::ll_data(a, b), detail::ll_data(c, d)};
    return true;
  }

  /// Polls packet pk until its halves carry flag and `second`. A data packet that is late
  /// (every 64 polls) has the header looked at too: a header of this step that describes
  /// another call is a mismatch, reported at once, whether or not the packet would ever come.
  template <class Ctx>
  ARK_HD bool poll(const Ctx& ctx, const std::uint64_t* pk, std::uint32_t second, std::uint64_t& a,
                   std::uint64_t& b) const {
    P::load_ll(pk, a, b);
    if (ready(a, b, second)) return true;
    wait_clock clock;
    for (unsigned spins = 0;; ++spins) {
      P::pause(spins);
      P::load_ll(pk, a, b);
      if (ready(a, b, second)) return true;
      if ((spins & 63u) == 63u && ((pk >= packets + 2 * detail::ll_header_packets && other_call(ctx)) ||
                                   !ctx.keep_waiting(clock, wait_kind::data, peer, flag, a >> 32)))
        return false;
    }
  }

  /// Whether the header of our step has come and describes a call other than ours (recorded).
  template <class Ctx>
  ARK_HD bool other_call(const Ctx& ctx) const {
    call_desc theirs;
    return arrived_header(theirs) && !ctx.check_peer_call(theirs, step, peer, step);
  }

  ARK_HD bool ready(std::uint64_t a, std::uint64_t b, std::uint32_t second) const {
    return static_cast<std::uint32_t>(a >> 32) == flag && static_cast<std::uint32_t>(b >> 32) == second;
  }
};

/// A channel's LL slots before its step is known: the first slot, and how a step picks its slot.
/// A call computes it once (all_reduce_one_shot_ll's `Early`), and then only a mask and a
/// multiply-add stand between its round and a packet's address, after every store's memory
/// clobber as before the first.
struct ll_channel {
  std::uint64_t* first = nullptr;
  std::uint64_t words = 0; ///< from one slot to the next
  std::uint64_t mask = 0;  ///< slots per channel - 1 (a power of two)
  ARK_HD std::uint64_t* slot(std::uint64_t step) const { return first + (step & mask) * words; }
};

template <unsigned Depth>
struct ll_packet : thread_transfers<Depth> {
  static constexpr std::uint8_t id = 2;
  static constexpr bool ll = true;
  static constexpr std::size_t vec_bytes = 8;

  template <class Ctx>
  ARK_HD static ll_writer<typename Ctx::platform> tx(const Ctx& ctx, int peer, std::uint64_t step) {
    return writer(ctx, ctx.lay().ll(ctx.remote(peer), ctx.out_link(peer), step), step);
  }

  template <class Ctx>
  ARK_HD static ll_reader<typename Ctx::platform> rx(const Ctx& ctx, int peer, std::uint64_t step) {
    return reader(ctx, ctx.lay().ll(ctx.local(), ctx.in_link(peer), step), peer, step);
  }

  /// Our channel into peer p's slots (where tx stores), and peer p's into ours (where rx polls).
  template <class Ctx>
  ARK_HD static ll_channel out_channel(const Ctx& ctx, int p) {
    return channel(ctx.lay(), ctx.lay().ll_first(ctx.remote(p), ctx.out_link(p)));
  }
  template <class Ctx>
  ARK_HD static ll_channel in_channel(const Ctx& ctx, int p) {
    return channel(ctx.lay(), ctx.lay().ll_first(ctx.local(), ctx.in_link(p)));
  }
  /// tx and rx on a channel computed beforehand: the same writer and reader.
  template <class Ctx>
  ARK_HD static ll_writer<typename Ctx::platform> tx(const Ctx& ctx, const ll_channel& c,
                                                     std::uint64_t step) {
    return writer(ctx, c.slot(step), step);
  }
  template <class Ctx>
  ARK_HD static ll_reader<typename Ctx::platform> rx(const Ctx& ctx, const ll_channel& c, int peer,
                                                     std::uint64_t step) {
    return reader(ctx, c.slot(step), peer, step);
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
    write_header(ctx, tx(ctx, p, step));
  }
  template <class Ctx>
  ARK_HD static void write_header(const Ctx& ctx, const ll_writer<typename Ctx::platform>& w) {
    w.store_header(0, ctx.desc.count);
    w.store_header(1, ctx.desc.meta);
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

private:
  ARK_HD static ll_channel channel(const layout& l, std::uint64_t* first) {
    return {first, l.ll_slot_stride / 8, l.ll_slots - 1u};
  }
  /// The writer and reader of `step` on the slot at `packets`: the step's flag, and that flag
  /// xor the call's tag in a data packet's second half.
  template <class Ctx>
  ARK_HD static ll_writer<typename Ctx::platform> writer(const Ctx& ctx, std::uint64_t* packets,
                                                         std::uint64_t step) {
    return {packets, detail::ll_flag(step), detail::ll_tagged(step, ctx.desc.tag())};
  }
  template <class Ctx>
  ARK_HD static ll_reader<typename Ctx::platform> reader(const Ctx& ctx, std::uint64_t* packets, int peer,
                                                         std::uint64_t step) {
    return {packets, detail::ll_flag(step), detail::ll_tagged(step, ctx.desc.tag()), peer, step};
  }
};

} // namespace ark::dma
