// ark/team/layout.hpp: where everything lives inside one rank's symmetric region.
//
// Every rank allocates one region of the same size and layout; peers map it and write into it.
// For each worker w (a GPU block or a host thread team) and each peer, the region holds a channel
// (the collectives' workers, then the point-to-point workers: layout::all_workers() of them):
//
//   head[w][src]   flag: the last pipeline step rank `src` announced to us       (written by src)
//   ack[w][dst]    flag: the last step rank `dst` finished reading from us        (written by dst)
//   bar[w][src]    flag: the last barrier epoch rank `src` reached                (written by src)
//   state[w]       our own step and barrier counters (never written by peers)
//   pair[w][peer]  a point-to-point worker's next step to and from that peer (ours alone)
//   plan[w]        a point-to-point worker's plan of its current group (ours alone)
//   ce[src][3]     flags of the copy-engine collectives (ready, sent, done: written by src)
//   claim          the word a failing worker claims before it writes the rank's error record
//                  (an atomic on device memory: GPUs have no native atomics on host memory)
// Each channel has max_depth + 1 slots: a sender runs at most Depth steps ahead of what the
// receiver finished, while the receiver may still be reading one more.
//
//   hdr[w][src][slot]   32-byte header of the step in that slot: call description + step
//   data[w][src][slot]  slot_bytes of payload, simple protocol
//   ll[w][src][slot]    LL packets: 2 header packets + 16 bytes per 8 data bytes (slots rounded
//                       up to a power of two)
//   stage[w][dst][slot] local staging of what an engine backend sends to dst
//
// Channels exist for peers only (world - 1 per worker, none for the owner itself: a rank never
// sends to itself through its region), so a budget's bytes all go to channels that carry data.
// Which channel of a region serves a peer depends on the region's owner: layout::link_of(w, owner,
// peer), which a context computes as in_link(p) (its own region, peer p) or out_link(p) (p's
// region, peer itself); every accessor of a channel takes that link.
//
// An engine backend's request queues are not in the symmetric region (dma/engine_queue.hpp).
//
// Flags sit 64 bytes apart so that host threads do not false-share them.
#pragma once

#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ark {

/// Sizes of a communicator's symmetric region; the same on every rank.
struct team_config {
  unsigned workers = 8; ///< most workers a collective may use (each has its own slots)
  /// Workers of their own for send and receive (communicator::send, recv, groups): each has
  /// its own slots too, beside the collectives' (taken from scratch_budget with automatic
  /// slots). Their steps are counted per pair of ranks, since only the two ranks of a send take
  /// part in it. 0: no point-to-point calls. p2p_auto: with automatic slots, a fifth of the
  /// workers the budget would hold without them (1 to 16: a send's bandwidth grows with its
  /// workers, docs/perf.md), else 2.
  unsigned p2p_workers = p2p_auto;
  static constexpr unsigned p2p_auto = ~0u;
  unsigned max_depth = 8; ///< the largest pipeline Depth calls may use
  /// Payload of a simple-protocol slot. 0: automatic, sized by scratch_budget (below).
  std::size_t slot_bytes = 64 << 10;
  std::size_t ll_slot_bytes = 16 << 10; ///< payload of an LL slot (the packets take twice this)
  bool staging = true;                  ///< reserve staging for engine backends
  /// With automatic slots (slot_bytes = 0), the most bytes of the symmetric region, whatever the
  /// world: the region holds slots for auto_workers_least workers (or `workers`, if fewer) as
  /// large as fit, up to auto_slot_most, then for as many more of `workers` as fit at that size;
  /// where that many do not fit with slots of auto_slot_least bytes, for as many as do, their
  /// slots as large as fit. The workers a call may use are then those (layout::workers).
  /// Explicit sizes (slot_bytes > 0) are taken as given: the region grows with workers x
  /// (world - 1) x (max_depth + 1) slots.
  std::size_t scratch_budget = 0;
  /// Automatic slots are never smaller than this unless one worker's slots would not fit:
  /// large messages lose no bandwidth down to it, and do below it (docs/perf.md, "Bounded
  /// scratch").
  static constexpr std::size_t auto_slot_least = 128 << 10;
  /// Nor larger than this: twice the slot moved 3 % more at four ranks, for twice the memory.
  static constexpr std::size_t auto_slot_most = 256 << 10;
  /// Automatic slots go to this many workers before more workers get any: below it a large
  /// call has too few blocks to move its bytes, and above it the slot size gains more than the
  /// worker count (docs/perf.md, "Bounded scratch").
  static constexpr unsigned auto_workers_least = 16;
};

/// The header a sender writes next to each step's payload; the receiver checks it. `place`: where
/// the buffers of a zero-copy call lie (dma::handshake), which the peers compare with theirs.
struct slot_header {
  std::uint64_t count;
  std::uint64_t meta;
  std::uint64_t step;
  std::uint64_t place[2];
};

/// Per-worker counters that only the owning rank touches.
struct worker_state {
  /// First pipeline step of the next call on every channel; the top bit is set by a call that
  /// leaves every credit implied (context::exchanged) and cleared by every other call that uses
  /// a step (context::finish). A call of no step (an empty share, the same on every rank)
  /// leaves the word as it is: the last step is still the one the bit speaks of.
  /// The next-to-top bit: a call of this worker failed (device_comm::run); later calls refuse.
  std::uint64_t round;
  static constexpr std::uint64_t exchanged_bit = std::uint64_t(1) << 63;
  static constexpr std::uint64_t failed_bit = std::uint64_t(1) << 62;
  std::uint64_t bar_epoch; ///< barriers passed
};

/// One channel of a region (layout::link_of): its index among the region's channels.
struct link {
  std::uint64_t index;
};

struct layout {
  static constexpr std::uint64_t flag_stride = 64;
  static constexpr std::uint64_t ll_header_bytes = 32; // two packets carry the 16-byte call description

  /// `workers`: the collectives'; `p2p`: the point-to-point workers after them.
  std::uint32_t world = 0, workers = 0, p2p = 0, slots = 0, staging = 0;
  /// LL slots per channel: slots rounded up to a power of two, so that a step's slot is a mask
  /// of the step, not a 64-bit remainder (tens of instructions on a GPU, on the latency path:
  /// before the first packet's store and again before the first poll; docs/perf.md). More slots
  /// than the depth needs only reuse each later.
  std::uint32_t ll_slots = 0;
  std::uint64_t slot_bytes = 0, ll_slot_bytes = 0, ll_slot_stride = 0;
  std::uint64_t head_off = 0, ack_off = 0, bar_off = 0, state_off = 0, pair_off = 0, plan_off = 0, ce_off = 0,
                claim_off = 0, hdr_off = 0, data_off = 0, ll_off = 0, stage_off = 0, total = 0;

  /// The most operations a point-to-point group holds, and the words of a point-to-point
  /// worker's plan: three per operation and one for the group (algorithms/p2p.hpp).
  static constexpr unsigned p2p_group_most = 64, p2p_plan_words = 3 * p2p_group_most + 1;

  /// Every worker with slots: the collectives', then the point-to-point workers.
  ARK_HD unsigned all_workers() const { return workers + p2p; }
  /// The index of point-to-point worker i (of p2p).
  ARK_HD unsigned p2p_worker(unsigned i) const { return workers + i; }
  /// Point-to-point worker i's plan of its current group (p2p_plan_words words). In the region,
  /// not in each thread's registers: per-thread arrays this large live in local memory, and a
  /// kernel that needs more local memory than the context holds makes the driver grow it, which
  /// waits for every kernel in the context, a peer's among them, that may wait for this very
  /// call (docs/perf.md).
  ARK_HD std::uint64_t* p2p_plan(std::byte* base, unsigned i) const {
    return reinterpret_cast<std::uint64_t*>(base + plan_off) + std::uint64_t(i) * p2p_plan_words;
  }
  /// Point-to-point worker i's next step on its channel to `peer` (`recv` false) or from it
  /// (true): the two directions use separate flags and slots, so each counts its own steps.
  /// Ours alone.
  ARK_HD std::uint64_t* pair_step(std::byte* base, unsigned i, int peer, bool recv) const {
    return reinterpret_cast<std::uint64_t*>(base + pair_off) +
           (std::uint64_t(i) * world + unsigned(peer)) * 2 + (recv ? 1 : 0);
  }

  /// The channels of one worker: world - 1 (one at world 1, which no call uses).
  ARK_HD std::uint32_t peers() const { return world > 1 ? world - 1 : 1; }
  /// The j-th channel of worker w in any region (j < peers()): a worker's channels are adjacent.
  ARK_HD ark::link link_at(unsigned w, unsigned j) const { return {std::uint64_t(w) * peers() + j}; }
  /// The channel of worker w in `owner`'s region that serves rank `peer` (peer != owner).
  ARK_HD ark::link link_of(unsigned w, int owner, int peer) const {
    return link_at(w, unsigned(peer) - (peer > owner ? 1u : 0u));
  }
  /// The peer that the j-th channel of a worker in `owner`'s region serves (link_of's inverse).
  ARK_HD static int peer_of(int owner, unsigned j) { return int(j) + (int(j) >= owner ? 1 : 0); }

  ARK_HD std::uint64_t* head(std::byte* base, ark::link c) const { return flag(base, head_off, c); }
  ARK_HD std::uint64_t* ack(std::byte* base, ark::link c) const { return flag(base, ack_off, c); }
  ARK_HD std::uint64_t* bar(std::byte* base, ark::link c) const { return flag(base, bar_off, c); }
  ARK_HD std::uint32_t* claim(std::byte* base) const {
    return reinterpret_cast<std::uint32_t*>(base + claim_off);
  }
  /// The flags rank src writes for the copy-engine collectives (collectives/copy_engine.hpp):
  /// `ready` and `sent` come in two, one per half of the scratch (a round's parity), `done` once.
  static constexpr unsigned ce_ready = 0, ce_sent = 2, ce_done = 4, ce_flags = 5;
  ARK_HD std::uint64_t* ce_flag(std::byte* base, int src, unsigned k) const {
    return reinterpret_cast<std::uint64_t*>(base + ce_off + (unsigned(src) * ce_flags + k) * flag_stride);
  }
  /// Scratch of the copy-engine all-reduce: the data slots, split evenly per sender, each part in
  /// two halves (rounds alternate between them).
  ARK_HD std::uint64_t ce_scratch_bytes() const { return (ll_off - data_off) / world / 512 * 512; }
  ARK_HD std::byte* ce_scratch(std::byte* base, int src, unsigned half = 0) const {
    return base + data_off + unsigned(src) * ce_scratch_bytes() + half * (ce_scratch_bytes() / 2);
  }
  ARK_HD worker_state* state(std::byte* base, unsigned w) const {
    return reinterpret_cast<worker_state*>(base + state_off + w * flag_stride);
  }
  ARK_HD slot_header* hdr(std::byte* base, ark::link c, std::uint64_t step) const {
    return reinterpret_cast<slot_header*>(base + hdr_off +
                                          (c.index * slots + step % slots) * sizeof(slot_header));
  }
  ARK_HD std::byte* data(std::byte* base, ark::link c, std::uint64_t step) const {
    return base + data_off + (c.index * slots + step % slots) * slot_bytes;
  }
  ARK_HD std::uint64_t* ll(std::byte* base, ark::link c, std::uint64_t step) const {
    return reinterpret_cast<std::uint64_t*>(base + ll_off +
                                            (c.index * ll_slots + (step & (ll_slots - 1))) * ll_slot_stride);
  }
  /// The first LL slot of a channel: ll() of its step 0; a step's is ll_slot_stride bytes on per
  /// slot, modulo ll_slots.
  ARK_HD std::uint64_t* ll_first(std::byte* base, ark::link c) const {
    return reinterpret_cast<std::uint64_t*>(base + ll_off + c.index * ll_slots * ll_slot_stride);
  }
  ARK_HD std::byte* stage(std::byte* base, ark::link c, std::uint64_t step) const {
    return base + stage_off + (c.index * slots + step % slots) * slot_bytes;
  }
  ARK_HD bool has_staging() const { return staging != 0; }
  ARK_HD unsigned max_depth() const { return slots - 1; }

private:
  ARK_HD std::uint64_t* flag(std::byte* base, std::uint64_t off, ark::link c) const {
    return reinterpret_cast<std::uint64_t*>(base + off + c.index * flag_stride);
  }
};

namespace detail {
inline std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }
} // namespace detail

namespace detail {
/// The layout of `workers` collective workers' channels and c.p2p_workers point-to-point
/// workers' with slots of `slot_bytes` (the rest from `c`).
inline layout place_layout(int world, unsigned workers, std::size_t slot_bytes, const team_config& c) {
  layout l;
  l.world = static_cast<std::uint32_t>(world);
  l.workers = workers;
  l.p2p = c.p2p_workers;
  l.slots = c.max_depth + 1;
  l.slot_bytes = slot_bytes;
  l.ll_slot_bytes = c.ll_slot_bytes;
  l.ll_slots = std::bit_ceil(l.slots);
  l.ll_slot_stride = detail::align_up(2 * c.ll_slot_bytes + layout::ll_header_bytes, 256);
  const std::uint64_t chans = std::uint64_t(l.all_workers()) * l.peers();
  std::uint64_t off = 0;
  l.head_off = off, off += chans * layout::flag_stride;
  l.ack_off = off, off += chans * layout::flag_stride;
  l.bar_off = off, off += chans * layout::flag_stride;
  l.state_off = off, off += std::uint64_t(l.all_workers()) * layout::flag_stride;
  l.pair_off = off,
  off += detail::align_up(std::uint64_t(l.p2p) * std::uint64_t(world) * 16, layout::flag_stride);
  l.plan_off = off,
  off += detail::align_up(std::uint64_t(l.p2p) * layout::p2p_plan_words * 8, layout::flag_stride);
  l.ce_off = off, off += std::uint64_t(world) * layout::ce_flags * layout::flag_stride;
  l.claim_off = off, off += layout::flag_stride;
  l.hdr_off = off, off += detail::align_up(chans * l.slots * sizeof(slot_header), 256);
  l.data_off = off, off += chans * l.slots * slot_bytes;
  l.ll_off = off, off += chans * l.ll_slots * l.ll_slot_stride;
  l.stage_off = off;
  l.staging = c.staging ? 1 : 0;
  if (c.staging) off += chans * l.slots * slot_bytes;
  l.total = off;
  return l;
}

/// The largest n in [lo, hi] with ok(n), given ok(lo) and ok monotonic (true, then false).
template <class T, class Ok>
T largest_that(T lo, T hi, Ok&& ok) {
  while (lo < hi) {
    const T mid = lo + (hi - lo + 1) / 2;
    if (ok(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}
} // namespace detail

/// Computes the layout for `world` ranks; throws invalid_argument on impossible sizes. With
/// automatic slots (team_config::slot_bytes = 0) the region fits team_config::scratch_budget:
/// auto_workers_least workers' slots as large as fit, in 4 KB steps, up to auto_slot_most, then
/// as many workers as fit with slots of that size (fewer workers cost a large call blocks,
/// smaller slots cost it a fence and a flag round trip per step); where auto_workers_least do
/// not fit with auto_slot_least-byte slots, as many workers as do, their slots as large as fit.
inline layout make_layout(int world, const team_config& c) {
  if (world < 1 || world > max_world)
    detail::throw_invalid("communicator", "world size " + std::to_string(world) + " is outside [1, " +
                                              std::to_string(max_world) + "]");
  if (c.workers < 1 || c.workers > 4096)
    detail::throw_invalid("communicator", "workers must be in [1, 4096]");
  if (c.p2p_workers > 1024 && c.p2p_workers != team_config::p2p_auto)
    detail::throw_invalid("communicator", "p2p_workers must be in [0, 1024] (or p2p_auto)");
  if (c.max_depth < 1 || c.max_depth > 63)
    detail::throw_invalid("communicator", "max_depth must be in [1, 63]");
  if (c.slot_bytes % 256 || (c.slot_bytes && c.slot_bytes < 256))
    detail::throw_invalid("communicator", "slot_bytes must be a positive multiple of 256 (or 0: automatic)");
  if (c.ll_slot_bytes < 256 || c.ll_slot_bytes % 256)
    detail::throw_invalid("communicator", "ll_slot_bytes must be a positive multiple of 256");
  if (c.p2p_workers == team_config::p2p_auto) {
    team_config r = c;
    r.p2p_workers = 2;
    if (!c.slot_bytes && c.scratch_budget) { // a fifth of what the budget holds without them
      r.p2p_workers = 0;
      const auto fits = [&](unsigned w) {
        return detail::place_layout(world, w, team_config::auto_slot_least, r).total <= c.scratch_budget;
      };
      const unsigned n = fits(1) ? detail::largest_that<unsigned>(1, c.workers, fits) : 1;
      r.p2p_workers = std::clamp(n / 5, 1u, 16u);
    }
    return make_layout(world, r);
  }
  if (c.slot_bytes) return detail::place_layout(world, c.workers, c.slot_bytes, c);
  if (!c.scratch_budget)
    detail::throw_invalid("communicator", "slot_bytes = 0 (automatic) sizes the slots by "
                                          "team_config.scratch_budget, which is 0: give one of them");
  const auto fits = [&](unsigned w, std::size_t s) {
    return detail::place_layout(world, w, s, c).total <= c.scratch_budget;
  };
  if (!fits(1, 256))
    detail::throw_invalid("communicator",
                          "team_config.scratch_budget of " + std::to_string(c.scratch_budget) +
                              " bytes cannot hold one worker's slots at world " + std::to_string(world) +
                              ": that takes " + std::to_string(detail::place_layout(world, 1, 256, c).total) +
                              " bytes (raise it, or lower max_depth, ll_slot_bytes or p2p_workers)");
  const std::size_t least = team_config::auto_slot_least, grain = 4 << 10;
  if (!fits(1, least)) // one worker, its slots as large as fit
    return detail::place_layout(world, 1,
                                256 * detail::largest_that<std::size_t>(
                                          1, least / 256, [&](std::size_t k) { return fits(1, 256 * k); }),
                                c);
  const auto largest_slot = [&](unsigned w) {
    return grain * detail::largest_that<std::size_t>(least / grain, team_config::auto_slot_most / grain,
                                                     [&](std::size_t k) { return fits(w, k * grain); });
  };
  const unsigned floor = std::min(c.workers, team_config::auto_workers_least);
  if (fits(floor, least)) { // the floor's slots as large as fit, then more workers of that size
    const std::size_t s = largest_slot(floor);
    return detail::place_layout(
        world, detail::largest_that<unsigned>(floor, c.workers, [&](unsigned n) { return fits(n, s); }), s,
        c);
  }
  const unsigned w = detail::largest_that<unsigned>(1, c.workers, [&](unsigned n) { return fits(n, least); });
  return detail::place_layout(world, w, largest_slot(w), c);
}

} // namespace ark
