// ark/team/layout.hpp: where everything lives inside one rank's symmetric region.
//
// Every rank allocates one region of the same size and layout; peers map it and write into it.
// For each worker w (a GPU block or a host thread team) and each peer, the region holds:
//
//   head[w][src]   flag: the last pipeline step rank `src` announced to us       (written by src)
//   ack[w][dst]    flag: the last step rank `dst` finished reading from us        (written by dst)
//   bar[w][src]    flag: the last barrier epoch rank `src` reached                (written by src)
//   state[w]       our own step and barrier counters (never written by peers)
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
// An engine backend's request queues are not in the symmetric region (dma/engine_queue.hpp).
//
// Flags sit 64 bytes apart so that host threads do not false-share them.
#pragma once

#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ark {

/// Sizes of a communicator's symmetric region; the same on every rank.
struct team_config {
  unsigned workers = 8;                 ///< most workers a call may use (each has its own slots)
  unsigned max_depth = 8;               ///< the largest pipeline Depth calls may use
  std::size_t slot_bytes = 64 << 10;    ///< payload of a simple-protocol slot
  std::size_t ll_slot_bytes = 16 << 10; ///< payload of an LL slot (the packets take twice this)
  bool staging = true;                  ///< reserve staging for engine backends
};

/// The header a sender writes next to each step's payload; the receiver checks it.
struct slot_header {
  std::uint64_t count;
  std::uint64_t meta;
  std::uint64_t step;
  std::uint64_t reserved;
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

struct layout {
  static constexpr std::uint64_t flag_stride = 64;
  static constexpr std::uint64_t ll_header_bytes = 32; // two packets carry the 16-byte call description

  std::uint32_t world = 0, workers = 0, slots = 0, staging = 0;
  /// LL slots per channel: slots rounded up to a power of two, so that a step's slot is a mask
  /// of the step, not a 64-bit remainder (tens of instructions on a GPU, on the latency path:
  /// before the first packet's store and again before the first poll; docs/perf.md). More slots
  /// than the depth needs only reuse each later.
  std::uint32_t ll_slots = 0;
  std::uint64_t slot_bytes = 0, ll_slot_bytes = 0, ll_slot_stride = 0;
  std::uint64_t head_off = 0, ack_off = 0, bar_off = 0, state_off = 0, ce_off = 0, claim_off = 0, hdr_off = 0,
                data_off = 0, ll_off = 0, stage_off = 0, total = 0;

  ARK_HD std::uint64_t* head(std::byte* base, unsigned w, int src) const {
    return flag(base, head_off, w, src);
  }
  ARK_HD std::uint64_t* ack(std::byte* base, unsigned w, int dst) const {
    return flag(base, ack_off, w, dst);
  }
  ARK_HD std::uint64_t* bar(std::byte* base, unsigned w, int src) const {
    return flag(base, bar_off, w, src);
  }
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
  ARK_HD slot_header* hdr(std::byte* base, unsigned w, int src, std::uint64_t step) const {
    return reinterpret_cast<slot_header*>(base + hdr_off +
                                          (chan(w, src) * slots + step % slots) * sizeof(slot_header));
  }
  ARK_HD std::byte* data(std::byte* base, unsigned w, int src, std::uint64_t step) const {
    return base + data_off + (chan(w, src) * slots + step % slots) * slot_bytes;
  }
  ARK_HD std::uint64_t* ll(std::byte* base, unsigned w, int src, std::uint64_t step) const {
    return reinterpret_cast<std::uint64_t*>(
        base + ll_off + (chan(w, src) * ll_slots + (step & (ll_slots - 1))) * ll_slot_stride);
  }
  /// The first LL slot of a channel: ll() of its step 0; a step's is ll_slot_stride bytes on per
  /// slot, modulo ll_slots.
  ARK_HD std::uint64_t* ll_first(std::byte* base, unsigned w, int src) const {
    return reinterpret_cast<std::uint64_t*>(base + ll_off + chan(w, src) * ll_slots * ll_slot_stride);
  }
  ARK_HD std::byte* stage(std::byte* base, unsigned w, int dst, std::uint64_t step) const {
    return base + stage_off + (chan(w, dst) * slots + step % slots) * slot_bytes;
  }
  ARK_HD bool has_staging() const { return staging != 0; }
  ARK_HD unsigned max_depth() const { return slots - 1; }

private:
  ARK_HD std::uint64_t chan(unsigned w, int peer) const { return std::uint64_t(w) * world + unsigned(peer); }
  ARK_HD std::uint64_t* flag(std::byte* base, std::uint64_t off, unsigned w, int peer) const {
    return reinterpret_cast<std::uint64_t*>(base + off + chan(w, peer) * flag_stride);
  }
};

namespace detail {
inline std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }
} // namespace detail

/// Computes the layout for `world` ranks; throws invalid_argument on impossible sizes.
inline layout make_layout(int world, const team_config& c) {
  if (world < 1 || world > max_world)
    detail::throw_invalid("communicator", "world size " + std::to_string(world) + " is outside [1, " +
                                              std::to_string(max_world) + "]");
  if (c.workers < 1 || c.workers > 4096)
    detail::throw_invalid("communicator", "workers must be in [1, 4096]");
  if (c.max_depth < 1 || c.max_depth > 63)
    detail::throw_invalid("communicator", "max_depth must be in [1, 63]");
  if (c.slot_bytes < 256 || c.slot_bytes % 256)
    detail::throw_invalid("communicator", "slot_bytes must be a positive multiple of 256");
  if (c.ll_slot_bytes < 256 || c.ll_slot_bytes % 256)
    detail::throw_invalid("communicator", "ll_slot_bytes must be a positive multiple of 256");
  layout l;
  l.world = static_cast<std::uint32_t>(world);
  l.workers = c.workers;
  l.slots = c.max_depth + 1;
  l.slot_bytes = c.slot_bytes;
  l.ll_slot_bytes = c.ll_slot_bytes;
  l.ll_slots = std::bit_ceil(l.slots);
  l.ll_slot_stride = detail::align_up(2 * c.ll_slot_bytes + layout::ll_header_bytes, 256);
  const std::uint64_t chans = std::uint64_t(c.workers) * std::uint64_t(world);
  std::uint64_t off = 0;
  l.head_off = off, off += chans * layout::flag_stride;
  l.ack_off = off, off += chans * layout::flag_stride;
  l.bar_off = off, off += chans * layout::flag_stride;
  l.state_off = off, off += std::uint64_t(c.workers) * layout::flag_stride;
  l.ce_off = off, off += std::uint64_t(world) * layout::ce_flags * layout::flag_stride;
  l.claim_off = off, off += layout::flag_stride;
  l.hdr_off = off, off += detail::align_up(chans * l.slots * sizeof(slot_header), 256);
  l.data_off = off, off += chans * l.slots * c.slot_bytes;
  l.ll_off = off, off += chans * l.ll_slots * l.ll_slot_stride;
  l.stage_off = off;
  l.staging = c.staging ? 1 : 0;
  if (c.staging) off += chans * l.slots * c.slot_bytes;
  l.total = off;
  return l;
}

} // namespace ark
