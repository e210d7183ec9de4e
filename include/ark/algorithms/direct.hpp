// ark/algorithms/direct.hpp: collectives where every rank talks to its peers directly:
// reduce-scatter, all-gather, broadcast, reduce, all-to-all, gather and scatter.
//
// Reading order (docs/architecture.md, "direct"): the worker's range is cut into slot-sized
// pieces; for each piece (one pipeline step) senders push their piece into the receivers' slots
// and receivers fold or copy what arrived. One network trip per step.
#pragma once

#include "ark/algorithms/pass.hpp"

namespace ark::algorithms {

/// Sends elements [off, off + n) of block p of `in` (blocks of `count`) to each peer p, as step
/// `s`: the send of reduce-scatter, all-to-all and scatter.
template <class Ctx, class T>
ARK_HD bool send_blocks(const Ctx& ctx, const T* in, std::size_t count, std::size_t off, std::size_t n,
                        std::uint64_t s) {
  using B = typename Ctx::backend;
  for (int p = 0; p < ctx.world(); ++p)
    if (p != ctx.rank() && !B::send(ctx, dma::peers::only(p), s, in + p * count + off, n * sizeof(T)))
      return false;
  return true;
}

/// Reduce-scatter: `in` holds world blocks of `count`; rank r gets block r reduced over all ranks.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool reduce_scatter_direct(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                                  const Op& op) {
  using B = typename Ctx::backend;
  const int me = ctx.rank();
  const dma::peers all = dma::peers::all();
  return pipeline_pieces<T>(
      ctx, count,
      [&](std::size_t off, std::size_t n, std::uint64_t s) { return send_blocks(ctx, in, count, off, n, s); },
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if (!B::open_recv(ctx, all, s) || !B::flush(ctx) ||
            !pass<T>(ctx, n, in_all_ranks<T>{in + me * count + off, s}, out_local<T>{out + off}, op, true))
          return false;
        B::close_recv(ctx, all, s);
        return true;
      },
      true);
}

/// Every rank's `count` elements land as block (sender) of the receivers' `out`: every rank's
/// (all-gather, ToAll) or `root`'s alone (gather). In place where a receiver's `in` is its own
/// block of `out`. A gather's other ranks send to the root alone and open no step, so it opens
/// with a step of headers (see reduce_direct); an all-gather's every rank opens every peer's step
/// before it stores a piece.
template <bool ToAll, class Ctx, class T, class Op>
ARK_HD bool gather_blocks(const Ctx& ctx, const T* in, T* out, std::size_t count, int root, const Op& op) {
  using B = typename Ctx::backend;
  const int me = ctx.rank();
  const bool receives = ToAll || me == root;
  const dma::peers all = dma::peers::all();
  return pipeline_pieces<T>(
      ctx, count,
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if constexpr (ToAll)
          return B::send(ctx, all, s, in + off, n * sizeof(T));
        else
          return me == root || B::send(ctx, dma::peers::only(root), s, in + off, n * sizeof(T));
      },
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if (!receives) return true;
        if (!B::open_recv(ctx, all, s) || !B::flush(ctx)) return false;
        T* own = out + me * count + off;
        if (own != in + off && !pass<T>(ctx, n, in_local<T>{in + off}, out_local<T>{own}, op, false))
          return false;
        for (int p = 0; p < ctx.world(); ++p)
          if (p != me && !pass<T>(ctx, n, in_peer{p, s}, out_local<T>{out + p * count + off}, op, false))
            return false;
        B::close_recv(ctx, all, s);
        return true;
      },
      ToAll, !ToAll);
}

/// All-gather: every rank's `count` elements land, in rank order, in every rank's `out`.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_gather_direct(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                              const Op& op) {
  return gather_blocks<true>(ctx, in, out, count, -1, op);
}

/// `root`'s `in` lands in every rank's `out`: all of it (broadcast), or its block p (of `count`,
/// Blocks) in rank p's (scatter). In place at the root where its `out` is what it keeps of `in`.
/// A step of headers comes first (send_headers): the root opens no step of the others' and the
/// others none of each other's, so without it the root would store its own output, and a rank
/// its first pieces, with no word from a rank whose call differs.
template <bool Blocks, class Ctx, class T, class Op>
ARK_HD bool from_root(const Ctx& ctx, const T* in, T* out, std::size_t count, int root, const Op& op) {
  using B = typename Ctx::backend;
  const bool is_root = ctx.rank() == root;
  const dma::peers from = dma::peers::only(root);
  return pipeline_pieces<T>(
      ctx, count,
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if constexpr (Blocks)
          return !is_root || send_blocks(ctx, in, count, off, n, s);
        else
          return !is_root || B::send(ctx, dma::peers::all(), s, in + off, n * sizeof(T));
      },
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if (is_root) {
          const T* own = in + (Blocks ? root * count : 0) + off;
          return out + off == own || pass<T>(ctx, n, in_local<T>{own}, out_local<T>{out + off}, op, false);
        }
        if (!B::open_recv(ctx, from, s) ||
            !pass<T>(ctx, n, in_peer{root, s}, out_local<T>{out + off}, op, false))
          return false;
        B::close_recv(ctx, from, s);
        return true;
      },
      false, true);
}

/// Broadcast: `root`'s `in` lands in every rank's `out`.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool broadcast_direct(const Ctx& ctx, const T* in, T* out, std::size_t count, int root,
                                             const Op& op) {
  return from_root<false>(ctx, in, out, count, root, op);
}

/// Reduce: every rank's `in` is folded, in rank order, into `root`'s `out`. A step of headers
/// comes first (send_headers): the other ranks open no step of anyone's, and would finish without
/// an error when the root's call, or a third rank's, differs from theirs.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool reduce_direct(const Ctx& ctx, const T* in, T* out, std::size_t count, int root,
                                          const Op& op) {
  using B = typename Ctx::backend;
  const bool is_root = ctx.rank() == root;
  const dma::peers all = dma::peers::all();
  return pipeline_pieces<T>(
      ctx, count,
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        return is_root || B::send(ctx, dma::peers::only(root), s, in + off, n * sizeof(T));
      },
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if (!is_root) return true;
        if (!B::open_recv(ctx, all, s) || !B::flush(ctx) ||
            !pass<T>(ctx, n, in_all_ranks<T>{in + off, s}, out_local<T>{out + off}, op, true))
          return false;
        B::close_recv(ctx, all, s);
        return true;
      },
      false, true);
}

/// All-to-all: block p (of `count`) of every rank's `in` lands as block (sender) of rank p's
/// `out`. Each step sends a piece of every peer's block to that peer alone and opens every
/// peer's step before storing any output, so every rank's header is checked first.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_to_all_direct(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                              const Op& op) {
  using B = typename Ctx::backend;
  const int me = ctx.rank();
  const dma::peers all = dma::peers::all();
  return pipeline_pieces<T>(
      ctx, count,
      [&](std::size_t off, std::size_t n, std::uint64_t s) { return send_blocks(ctx, in, count, off, n, s); },
      [&](std::size_t off, std::size_t n, std::uint64_t s) {
        if (!B::open_recv(ctx, all, s) || !B::flush(ctx) ||
            !pass<T>(ctx, n, in_local<T>{in + me * count + off}, out_local<T>{out + me * count + off}, op,
                     false))
          return false;
        for (int p = 0; p < ctx.world(); ++p)
          if (p != me && !pass<T>(ctx, n, in_peer{p, s}, out_local<T>{out + p * count + off}, op, false))
            return false;
        B::close_recv(ctx, all, s);
        return true;
      },
      true);
}

/// Gather: every rank's `in` lands as block (rank) of `root`'s `out`. In place at the root when
/// its `in` is block `root` of its `out`.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool gather_direct(const Ctx& ctx, const T* in, T* out, std::size_t count, int root,
                                          const Op& op) {
  return gather_blocks<false>(ctx, in, out, count, root, op);
}

/// Scatter: block p (of `count`) of `root`'s `in` lands in rank p's `out`. In place at the root
/// when its `out` is block `root` of its `in`.
template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool scatter_direct(const Ctx& ctx, const T* in, T* out, std::size_t count, int root,
                                           const Op& op) {
  return from_root<true>(ctx, in, out, count, root, op);
}

} // namespace ark::algorithms
