// ark/collectives/copy_engine.hpp: collectives whose bytes move on the copy engine only.
//
// dma::copy_engine (or call_options::max_ctas = 0 for all_gather and broadcast) moves every byte
// with copies straight into the peers' registered recv buffers, ordered by flags, and runs no
// kernel except, for an all-reduce, one short reduction kernel on a bounded number of blocks.
// On GPUs each step below is a stream operation of the call's stream (a copy, or a 64-bit
// memory write or wait executed by the stream's front end): nothing occupies an SM while bytes
// move or while a rank waits for its peers, so a kernel running beside the collective (a GEMM
// whose blocks take a whole SM each) keeps every SM. On the host platform the same steps run at
// once in the calling thread (the model our host tests exercise).
//
// Flags (layout::ce_flag, written by the peer named): `ready` (the peer entered this round: we
// may write into its recv buffer and scratch), `sent` (its copy to us landed), `done` (its
// reduced chunk landed). Values carry a per-communicator epoch and a hash of the call and are
// waited for by equality, so a peer making a different call never satisfies a wait: on GPUs the
// CPU proxy's watchdog turns such a wait into a timeout error (and releases the stream), on the
// host the wait itself is bounded. One round:
//
//   all-gather / broadcast:  ready -> peers;  per receiver q: wait ready(q), copy block, sent -> q;
//                            wait sent(every sender)
//   all-reduce (chunk r of the elements belongs to rank r):
//                            ready -> peers;  per peer q: wait ready(q), copy in[chunk q] into q's
//                            scratch slot for us, sent -> q;  wait sent(all);  reduce kernel:
//                            out[chunk me] = fold(in[chunk me], scratch slots);  per peer q: copy
//                            out[chunk me] into q's out, done -> q;  wait done(all)
// An all-reduce larger than the scratch (the region's data slots, split per sender) takes
// several rounds. In place works: a peer overwrites our in[chunk q] only after our copy of it
// landed (its wait for our `sent`).
#pragma once

#include "ark/algorithms/pass.hpp"
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

/// Flag values of one round: the epoch in the high half, a hash of the call in the low half.
inline std::uint64_t ce_value(std::uint64_t epoch, const call_desc& d) {
  const std::uint64_t h = d.count * 0x9E3779B97F4A7C15ull ^ d.meta;
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

} // namespace detail
} // namespace ark
