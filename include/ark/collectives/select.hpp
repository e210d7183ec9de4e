// ark/collectives/select.hpp: the default choice of algorithm, backend and worker count.
//
// A call that names `algo::automatic` or `dma::automatic` gets its algorithm from here. Every rank
// computes the same choice from the same (collective, bytes, world), so the choice never needs
// agreeing on. The thresholds live in `tuning`, which communicator::config carries; the defaults
// per platform come from measurements recorded in docs/perf.md.
#pragma once

#include "ark/algorithms/algorithms.hpp"

#include <cstddef>
#include <cstdint>

namespace ark {

struct tuning {
  std::size_t ll_max_bytes = 64 << 10;        ///< LL packets up to this many bytes per rank
  std::size_t one_shot_max_bytes = 1 << 20;   ///< one-shot all-reduce up to here (any world > 1)
  std::size_t direct_max_world = 8;           ///< direct (not ring) collectives up to this world
  std::size_t bytes_per_worker = 256 << 10;   ///< one more worker per this many bytes (thread copies)
  std::size_t ll_bytes_per_worker = 64 << 10; ///< one more worker per this many bytes (LL packets)
  unsigned threads = 1;                       ///< threads per worker
  /// All-reduce, reduce-scatter and all-gather on registered buffers read them in place
  /// (algo::zero_copy) from this many bytes per rank; below, the staged choice above, whose LL
  /// packets take fewer protocol steps (docs/perf.md, "Zero-copy").
  std::size_t zero_copy_min_bytes = 1 << 20;
};

struct choice {
  std::uint8_t algorithm; ///< algo::*::id
  bool ll;                ///< LL packets (else thread copies)
};

/// `bytes` is the per-rank payload of the call (what each rank contributes).
ARK_HD inline choice select(collective k, std::size_t bytes, int world, const tuning& t) {
  const bool ll = bytes <= t.ll_max_bytes;
  switch (k) {
  case collective::all_reduce:
    if (world == 1 || bytes <= t.one_shot_max_bytes) return {algo::one_shot::id, ll};
    return {world <= static_cast<int>(t.direct_max_world) ? algo::two_shot::id : algo::ring::id, false};
  case collective::reduce_scatter:
  case collective::all_gather:
    return {world <= static_cast<int>(t.direct_max_world) ? algo::direct::id : algo::ring::id, ll};
  default:
    return {algo::direct::id, ll};
  }
}

/// Whether an automatic choice reads the buffers of collective K in place (algo::zero_copy) when
/// they are registered. Every rank decides alike when the ranks' buffers are alike (registered
/// at the same place); a rank whose buffers are not meets the others' zero-copy call with a
/// staged one: a mismatch error (the algorithm), never wrong data.
ARK_HD inline bool select_zero_copy(collective k, std::size_t bytes, int world, const tuning& t) {
  return (k == collective::all_reduce || k == collective::reduce_scatter || k == collective::all_gather) &&
         world > 1 && bytes >= t.zero_copy_min_bytes;
}

/// Workers for a call: one per `bytes_per_worker` (LL: `ll_bytes_per_worker`), at least one, at
/// most `max_workers`.
ARK_HD inline unsigned select_workers(std::size_t bytes, unsigned max_workers, const tuning& t, bool ll) {
  const std::size_t per = ll ? t.ll_bytes_per_worker : t.bytes_per_worker;
  const std::size_t w = (bytes + per - 1) / per;
  return w < 1 ? 1u : w > max_workers ? max_workers : static_cast<unsigned>(w);
}

} // namespace ark
