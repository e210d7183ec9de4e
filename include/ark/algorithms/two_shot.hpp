// ark/algorithms/two_shot.hpp: two-shot all-reduce (a direct reduce-scatter, then a direct all-gather).
//
// Reading order (docs/architecture.md, "two-shot"): the worker's range is cut into `world` shards;
// rank r owns shard r. In each round j every rank sends piece j of shard p to rank p (step 2j), the
// owner folds all contributions in rank order and, in the same pass, writes the result to its
// output and into every peer's slot (step 2j+1); then every rank copies the peers' results out.
// Each byte crosses the network twice in total, whatever the world size.
#pragma once

#include "ark/algorithms/pass.hpp"

namespace ark::algorithms {

template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_reduce_two_shot(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                                const Op& op) {
  using B = typename Ctx::backend;
  const dma::peers all = dma::peers::all();
  const int me = ctx.rank(), world = ctx.world();
  const elem_range mine = ctx.template partition<T>(count);
  const std::size_t piece = ctx.template piece_elems<T>();
  auto shard = [&](int r) {
    return split(mine, static_cast<unsigned>(world), static_cast<unsigned>(r), align_elems<T>);
  };
  // piece j of shard r: [begin, begin + len)
  auto cut = [&](int r, std::uint64_t j) {
    const elem_range s = shard(r);
    const std::size_t b = min_of<std::size_t>(j * piece, s.len);
    return elem_range{s.begin + b, min_of(piece, s.len - b)};
  };
  std::size_t longest = 0;
  for (int r = 0; r < world; ++r) longest = shard(r).len > longest ? shard(r).len : longest;
  const std::uint64_t rounds = div_up(longest, piece);
  for (std::uint64_t j = 0; j < rounds; ++j) {
    const std::uint64_t s1 = ctx.round + 2 * j, s2 = s1 + 1;
    // reduce-scatter: piece j of shard p goes to rank p
    for (int p = 0; p < world; ++p) {
      if (p == me) continue;
      const elem_range c = cut(p, j);
      if (!B::send(ctx, dma::peers::only(p), s1, in + c.begin, c.len * sizeof(T))) return false;
    }
    if (!B::open_recv(ctx, all, s1) || !B::flush(ctx) || !B::open_send(ctx, all, s2)) return false;
    const elem_range c = cut(me, j);
    if (!pass<T>(ctx, c.len, in_all_ranks<T>{in + c.begin, s1}, out_local_all<T>{out + c.begin, s2}, op,
                 true))
      return false;
    if (!B::close_send(ctx, all, s2, c.len * sizeof(T))) return false;
    B::close_recv(ctx, all, s1);
    // all-gather: every owner's result lands in our output
    if (!B::open_recv(ctx, all, s2)) return false;
    for (int p = 0; p < world; ++p) {
      if (p == me) continue;
      const elem_range r = cut(p, j);
      if (!pass<T>(ctx, r.len, in_peer{p, s2}, out_local<T>{out + r.begin}, op, false)) return false;
    }
    B::close_recv(ctx, all, s2);
  }
  return ctx.finish(2 * rounds, true);
}

} // namespace ark::algorithms
