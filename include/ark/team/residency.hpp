// ark/team/residency.hpp: how many thread blocks a call may use when ranks share a GPU.
//
// A call's blocks wait for its peers' blocks (flags, packets), so every block of every rank's call
// must be able to be resident at once. Ranks on GPUs of their own always can (a call uses at most
// a block per SM by default); ranks that share a GPU split its SMs, and a rank whose blocks took
// them all leaves its peer's call waiting for SMs until the timeout. Every rank computes the same
// cap from the same exchanged table, so all ranks of a call agree on its worker count.
#pragma once

#include "ark/concepts/device.hpp" // gpu_placement

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace ark::detail {

/// How many of the `world` ranks of `all` run on rank `me`'s GPU (in its process too, with
/// `same_process`: its context), `me` included. 1 without a GPU (an empty PCI address).
inline std::size_t sharers(const gpu_placement* all, int world, int me, bool same_process) {
  if (all[me].pci[0] == '\0') return 1;
  std::size_t n = 0;
  for (int q = 0; q < world; ++q)
    n += std::strncmp(all[me].pci, all[q].pci, sizeof all[me].pci) == 0 &&
         (!same_process || all[q].process == all[me].process);
  return n;
}

/// The most blocks one call may use so that, on every GPU that the `world` ranks of `all` share
/// (an empty PCI address is no GPU), the calls of all the ranks on it fit at once: each rank holds `kernels`
/// calls' blocks at a time (2 with early launch: the next call's blocks become resident while the current
/// call runs) and `persistent` blocks of its own for good (a device-graph launcher); one SM per GPU is left
/// for the small kernels beside the calls (copy-engine waits). At least 1. 0: no GPU is shared.
inline unsigned shared_gpu_block_cap(const gpu_placement* all, int world, unsigned kernels,
                                     unsigned persistent) {
  unsigned cap = 0;
  for (int r = 0; r < world; ++r) {
    const auto sharing = static_cast<unsigned>(sharers(all, world, r, false));
    if (sharing < 2) continue;
    const long free_sms = static_cast<long>(all[r].sms) - static_cast<long>(sharing * persistent) - 1;
    const long per_rank = free_sms / static_cast<long>(sharing * std::max(kernels, 1u));
    const unsigned here = static_cast<unsigned>(std::max(per_rank, 1L));
    cap = cap == 0 ? here : std::min(cap, here);
  }
  return cap;
}

/// How many of the `world` ranks of `all` run in rank `me`'s process on its GPU, `me` included:
/// they share a context (CUDA's, HIP's), and so its hardware queues. 1 without a GPU.
inline std::size_t context_sharers(const gpu_placement* all, int world, int me) {
  return sharers(all, world, me, true);
}

/// The tightest context of a team: the fewest hardware queues that one of its ranks has to
/// itself where ranks share a context (its queues ÷ its ranks), with those two numbers. Every
/// rank computes it from the same table, so all refuse a call, or none. No shared context:
/// per_rank is SIZE_MAX.
struct queue_share {
  std::size_t per_rank = static_cast<std::size_t>(-1);
  int queues = 0;
  std::size_t ranks = 1;
};
inline queue_share tightest_context(const gpu_placement* all, int world) {
  queue_share t;
  for (int r = 0; r < world; ++r) {
    const std::size_t n = context_sharers(all, world, r);
    if (n < 2) continue;
    const std::size_t per = static_cast<std::size_t>(std::max(all[r].queues, 0)) / n;
    if (per < t.per_rank) t = {per, all[r].queues, n};
  }
  return t;
}

/// The streams a communicator holds for its rank where ranks share a context (docs/guide.md, "Ranks
/// that share a GPU"): its own; the engine's with staging (one for the CPU proxy, or the
/// device-graph engine's); and the one the library's host helpers (gpu::copy, zero) use on the
/// rank's thread. The copy-engine collectives run on the call's stream there. Every stream of
/// every rank in a context needs a hardware queue of its own: `queues / ranks - held_streams`
/// are left for the rank's own streams.
inline constexpr std::size_t held_streams(bool staging) { return 2 + (staging ? 1 : 0); }

} // namespace ark::detail
