// ark/algorithms/one_shot.hpp: one-shot all-reduce.
//
// Reading order (docs/architecture.md, "one-shot"): every rank pushes its whole input to every
// peer, then reduces all contributions locally, in rank order, so every rank computes the same
// bits. One network trip per step: the latency choice for small messages, and at two ranks it
// moves no more bytes than a ring. Data larger than a slot goes in pipelined steps.
#pragma once

#include "ark/algorithms/pass.hpp"

namespace ark::algorithms {

template <class Ctx, class T, class Op>
ARK_HD bool all_reduce_one_shot(const Ctx& ctx, const T* in, T* out, std::size_t count, const Op& op) {
  using B = typename Ctx::backend;
  const dma::peers all = dma::peers::all();
  return pipeline_pieces<T>(
      ctx, count,
      // 1. push our piece into every peer's slot for step s
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        return B::send(ctx, all, s, in + off, n * sizeof(T));
      },
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        // 2. wait for every peer's piece, checking that its call matches ours
        // 3. our input may alias the output: engines must be done reading it
        // 4. out = in[rank 0] op in[rank 1] op ... in rank order
        if (!B::open_recv(ctx, all, s) || !B::flush(ctx) ||
            !pass<T>(ctx, n, in_all_ranks<T>{in + off, s}, out_local<T>{out + off}, op, true))
          return false;
        B::close_recv(ctx, all, s);
        return true;
      },
      true);
}

} // namespace ark::algorithms
