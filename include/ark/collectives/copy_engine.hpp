// ark/collectives/copy_engine.hpp: collectives whose bytes move on the copy engine only.
//
// dma::copy_engine (or call_options::max_ctas = 0 for all_gather and broadcast) moves every byte
// with copies straight into the peers' registered recv buffers, ordered by flags, and runs no
// kernel except, for an all-reduce, short reduction kernels on a bounded number of blocks.
// On GPUs each step below is work on a stream: a copy (a copy engine), or flag writes and the
// waits after them: one block of one warp that writes, then spins on the flags, bounded by the
// timeout (ce_flags_work). Waits are kernels, not stream wait operations, because stream waits
// slow a GEMM beside them far more than the copies do, or than a warp that spins, even when the
// wait is satisfied at once (docs/perf.md). Writes ride in the kernel of the waits that follow
// them, and are dropped once the rank recorded a failure: a stream memory operation could not be,
// and a flag written behind a wait that failed would let a late peer finish with mixed data and
// no error. Since a write is held back until the next wait, a call loads its kernels before it
// enqueues anything (ce_ops::preload): under lazy module loading, CUDA's default, a first launch
// in mid-call waits for the kernels in its context, its own waits included, while the peer waits
// for the write held back (a deadlock).
// On the host platform the same steps run at once (the model our host tests exercise).
//
// Flags (layout::ce_flag, written by the peer named): `ready` (the peer may write into our
// scratch, or recv buffer), `sent` (its copy to us landed), `done` (its last result landed).
// `ready` and `sent` come in two, one per half of the scratch. Values carry a per-communicator
// epoch (one per round) and a hash of the call and are waited for by equality, so a peer making
// a different call never satisfies a wait: it times out (recorded as the rank's error). On GPUs
// the stream moves on: copies already enqueued behind the wait still land in the peer's
// registered buffer (within it: windows have one size on every rank), but no later flag of the rank is
// written, so that peer cannot take them for a finished step: it times out too. What this does not cover:
// copies cannot be held back. A call enqueued behind the failed one before the host saw the failure runs its
// copies too (its waits give up at once), into the peers' scratch and recv buffers; a peer that finishes the
// failed call all the same (every flag it needed had been written) can find such a copy in its output.
// Pulling instead of pushing (every copy into the copier's own memory) would close this; not done yet: it
// changes the protocol, and no 2-GPU machine was there to measure it.
//
//   all-gather / broadcast, on the call's stream:
//       ready -> peers;  per receiver q: wait ready(q), copy block, sent -> q;
//       wait sent(every sender)
//   all-reduce (chunk r of the elements belongs to rank r), in rounds: round k moves part k of
//   every chunk through half k % 2 of each sender's scratch part. Three streams of the
//   communicator, ordered after the call's stream and it after them, run:
//       push:    per round k, per peer q: wait ready_k(q), copy in[part k of chunk q] into
//                half k % 2 of q's scratch for us, sent_k -> q
//       fold:    ready_0, ready_1 -> peers; per round k: wait sent_k(all); reduce kernel:
//                out[part k of chunk me] = fold(in, the scratch halves); ready_{k+2} -> peers
//       gather:  per round k, after its reduction: per peer q: copy out[part k of chunk me]
//                into q's out; after the last round: done -> peers; wait done(all)
//   so that the copies to the peers of round k + 1 (push) and of round k - 1 (gather) and the
//   reduction of round k run at once.
//   Waiting by equality on a flag that is written again is safe: a peer writes ready_{k+2} only
//   after it received our sent_k, which we write only after we saw ready_k; sent_{k+2} likewise
//   (its push waited for our ready_{k+2}); `done` is written once per call. In place works: a
//   peer overwrites our in[part k of chunk q] only after our copy of it landed (its fold waited
//   for our sent_k).
#pragma once

#include "ark/algorithms/pass.hpp"
#include "ark/dma/thread_copy.hpp"
#include "ark/team/context.hpp"

#include <chrono>
#include <thread>
#include <vector>

namespace ark {

/// A user buffer registered on every rank: where each rank's copy lives in this address space.
/// Trivially copyable, so kernels can take it by value.
struct window_view {
  std::size_t bytes = 0;
  std::byte* base[max_world] = {};
};

namespace detail {

/// Flag values of one round: the epoch in the high half, a hash of the call and of where its
/// output lies (`place`: which registered window, and where in it) in the low half. Ranks whose
/// recv buffers lie at different places would copy into each other's buffers at the wrong place:
/// their waits never match, and the call times out on every rank.
inline std::uint64_t ce_value(std::uint64_t epoch, const call_desc& d, std::uint64_t place) {
  auto mix = [](std::uint64_t x) { // splitmix64's finalizer: a bijection, and not linear
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  const std::uint64_t h = mix(mix(d.count * 0x9E3779B97F4A7C15ull ^ d.meta) ^ mix(place + 1));
  return (epoch << 32) | ((h >> 32) ^ (h & 0xffffffffull));
}

/// The reduction of one all-reduce round: out[i] = fold over ranks (in rank order) of
/// (rank == me ? in : scratch[rank])[i], finalized; elements split over the blocks.
template <class T, class Op>
struct ce_reduce_work {
  const T* in;
  T* out;
  const T* scratch[max_world];
  int world, me;
  std::size_t n;
  Op op;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    const std::size_t stride = static_cast<std::size_t>(workers) * g.size();
    for (std::size_t i = worker * static_cast<std::size_t>(g.size()) + g.thread_rank(); i < n; i += stride) {
      acc_t<T> acc = to_acc(me == 0 ? in[i] : scratch[0][i]);
      for (int r = 1; r < world; ++r) acc = op(acc, to_acc(r == me ? in[i] : scratch[r][i]));
      if constexpr (finalizing_op<Op, T>) acc = op.finalize(acc, world);
      out[i] = from_acc<T>(acc);
    }
  }
};

/// One step of a copy-engine call's stream, run by one block of one warp: writes flags (a
/// release store each), then waits for flags[i] == value, i < n, each on one thread, bounded by
/// the team's timeout and given up at once once the rank recorded an error (a later wait of a
/// failed call). The writes come first: a step's writes are those enqueued before its waits.
/// Nothing is written once this rank recorded a failure: a stream moves on past a wait that
/// failed, and a flag written behind it would tell a late peer that data had landed which never
/// did, or that a scratch half was free while it was not: that peer would finish with mixed
/// data and no error. Without the flag it waits for it, and times out too.
template <device P>
struct ce_flags_work {
  team_view team;
  std::uint64_t* writes[max_world];
  std::uint64_t written[max_world];
  int nw;
  std::uint64_t* flags[max_world];
  int peers[max_world];
  int n;
  std::uint64_t value;
  template <class G>
  ARK_HD void operator()(G& g, unsigned, unsigned) const {
    // the bound and the abort flag are the context's, as for every other wait
    const context<P, dma::thread_copy<1>, G> ctx(g, team, 0, 1, call_desc{});
    // a failure recorded by a step before this one on the stream (the kernel boundary orders its
    // claim word before this load), or on another stream ordered before it
    if (nw && !ctx.failed_here())
      for (int i = static_cast<int>(g.thread_rank()); i < nw; i += static_cast<int>(g.size()))
        P::store_release(writes[i], written[i]);
    for (int i = static_cast<int>(g.thread_rank()); i < n; i += static_cast<int>(g.size())) {
      const std::uint64_t t0 = P::now_ns();
      wait_clock clock{t0, t0 + ctx.abort_poll_ns};
      for (unsigned spins = 0;; ++spins) {
        const std::uint64_t seen = P::load_acquire(flags[i]);
        if (seen == value) break;
        P::pause(spins);
        // a later wait of a call that already failed gives up at once: keep_waiting reads the
        // rank's claim word, in device memory, so that polling blocks do not all read the error
        // record in host memory (a PCIe read storm that slows the copies beside them)
        if ((spins & 63u) == 63u && !ctx.keep_waiting(clock, wait_kind::data, peers[i], value, seen)) break;
      }
    }
  }
};

} // namespace detail
} // namespace ark
