// ark/algorithms/ring.hpp: pipelined ring reduce-scatter / all-gather / all-reduce.
//
// Reading order (docs/architecture.md, "ring"): ranks form a ring, each sending only to the next
// and receiving only from the previous one. The data is cut into `world` chunks. In the
// reduce-scatter phase a chunk travels world-1 hops, each rank adding its own contribution, and
// ends fully reduced at its owner; in the all-gather phase each owner's result travels world-1
// hops and is copied out everywhere. All-reduce fuses the last reduce-scatter hop with the first
// all-gather hop. Chunks are further cut into slot-sized pieces (rounds); with Depth slots in
// flight, piece j+1 moves while piece j is being reduced one hop further.
//
// The same body serves three collectives through a `Chunks` object saying where piece j of chunk c
// comes from (src), goes to (dst) and how long it is (len).
#pragma once

#include "ark/algorithms/pass.hpp"

namespace ark::algorithms {

/// All-reduce: chunk c is shard c of the worker's range, in place in both buffers.
template <class T>
struct ring_chunks_all_reduce {
  const T* in;
  T* out;
  elem_range range;
  int world;
  std::size_t piece;
  ARK_HD elem_range cut(int c, std::uint64_t j) const {
    const elem_range s = split(range, static_cast<unsigned>(world), static_cast<unsigned>(c), align_elems<T>);
    const std::size_t b = min_of<std::size_t>(j * piece, s.len);
    return {s.begin + b, min_of(piece, s.len - b)};
  }
  ARK_HD std::size_t len(int c, std::uint64_t j) const { return cut(c, j).len; }
  ARK_HD const T* src(int c, std::uint64_t j) const { return in + cut(c, j).begin; }
  ARK_HD T* dst(int c, std::uint64_t j) const { return out + cut(c, j).begin; }
  ARK_HD std::uint64_t rounds() const {
    std::size_t longest = 0;
    for (int c = 0; c < world; ++c) {
      const std::size_t l =
          split(range, static_cast<unsigned>(world), static_cast<unsigned>(c), align_elems<T>).len;
      longest = l > longest ? l : longest;
    }
    return div_up(longest, piece);
  }
};

/// Reduce-scatter and all-gather: chunk c is block c (of `block` elements) of the bigger buffer;
/// every chunk's piece j covers the same elements of its block.
template <class T>
struct ring_chunks_blocks {
  const T* in;
  T* out;
  elem_range range;  // this worker's part of a block
  std::size_t block; // elements per block
  std::size_t piece;
  bool blocked_input; // reduce-scatter: the input is blocked; all-gather: the output is
  ARK_HD std::size_t offset(std::uint64_t j) const {
    return range.begin + min_of<std::size_t>(j * piece, range.len);
  }
  ARK_HD std::size_t len(int, std::uint64_t j) const {
    return min_of(piece, range.len - min_of<std::size_t>(j * piece, range.len));
  }
  ARK_HD const T* src(int c, std::uint64_t j) const {
    return in + (blocked_input ? c * block : 0) + offset(j);
  }
  ARK_HD T* dst(int c, std::uint64_t j) const { return out + (blocked_input ? 0 : c * block) + offset(j); }
  ARK_HD std::uint64_t rounds() const { return div_up(range.len, piece); }
};

template <class T, class Ctx, class Chunks, class Op>
ARK_HD ARK_FORCEINLINE bool ring(const Ctx& ctx, const Chunks& ch, bool rs, bool ag, const Op& op) {
  using B = typename Ctx::backend;
  const int n = ctx.world(), r = ctx.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  const dma::peers to = dma::peers::only(next), from = dma::peers::only(prev);
  auto mod = [n](int c) { return ((c % n) + n) % n; };
  const std::uint64_t rounds = ch.rounds();
  if (n == 1) { // no ring: the result is our own contribution
    for (std::uint64_t j = 0; j < rounds; ++j)
      if (ch.dst(r, j) != ch.src(r, j) &&
          !pass<T>(ctx, ch.len(r, j), in_local<T>{ch.src(r, j)}, out_local<T>{ch.dst(r, j)}, op, rs))
        return false;
    return ctx.finish(0);
  }
  const std::uint64_t per_round = (rs ? n - 1 : 0) + (ag ? n - 1 : 0);
  // Every output store follows a check of every rank's header: in a reduce-scatter (and the
  // all-reduce's) a chunk is stored only after n - 1 hops, each of which checked the header of
  // the hop before, so every pair of neighbours but (us, next) has matched, and that chain joins
  // every rank. An all-gather stores each block as it forwards it, after one checked hop: at two
  // ranks that hop is the only peer's; at more it spends a step of headers first (send_headers).
  const bool headers = !rs && n > 2 && rounds != 0;
  const std::uint64_t first = ctx.round + (headers ? 1 : 0);
  if (headers && !send_headers(ctx, ctx.round)) return false;
  for (std::uint64_t j = 0; j < rounds; ++j) {
    const std::uint64_t S = first + j * per_round;
    std::uint64_t a = S; // first step of the all-gather phase
    if (rs) {
      const int c0 = mod(r - 1);
      if (!B::send(ctx, to, S, ch.src(c0, j), ch.len(c0, j) * sizeof(T))) return false;
      for (int t = 1; t < n; ++t) {
        const int c = mod(r - 1 - t); // t == n-1: c == r, our chunk, now complete
        const bool last = t == n - 1;
        const std::uint64_t rx = S + t - 1, tx = S + t;
        if (!B::open_recv(ctx, from, rx)) return false;
        const in_local_peer<T> in{ch.src(c, j), prev, rx};
        const std::size_t bytes = ch.len(c, j) * sizeof(T);
        if (!last || ag) {
          if (!B::open_send(ctx, to, tx)) return false;
          const bool ok =
              last ? pass<T>(ctx, ch.len(c, j), in, out_local_peer<T>{ch.dst(c, j), next, tx}, op, true)
                   : pass<T>(ctx, ch.len(c, j), in, out_peer{next, tx}, op, false);
          if (!ok || !B::close_send(ctx, to, tx, bytes)) return false;
        } else if (!pass<T>(ctx, ch.len(c, j), in, out_local<T>{ch.dst(c, j)}, op, true)) {
          return false;
        }
        B::close_recv(ctx, from, rx);
      }
      a = S + n - 1;
    } else if (ag) {
      if (!B::send(ctx, to, S, ch.src(r, j), ch.len(r, j) * sizeof(T))) return false;
      if (j == 0 && headers && !check_headers(ctx, ctx.round)) return false;
    }
    if (!ag) continue;
    // engines may still read our input, which the output may alias
    if (!B::flush(ctx)) return false;
    for (int t = 1; t < n; ++t) {
      const int c = mod(r - t);
      const std::uint64_t rx = a + t - 1, tx = a + t;
      if (!B::open_recv(ctx, from, rx)) return false;
      if (t < n - 1) {
        if (!B::open_send(ctx, to, tx) ||
            !pass<T>(ctx, ch.len(c, j), in_peer{prev, rx}, out_local_peer<T>{ch.dst(c, j), next, tx}, op,
                     false) ||
            !B::close_send(ctx, to, tx, ch.len(c, j) * sizeof(T)))
          return false;
      } else if (!pass<T>(ctx, ch.len(c, j), in_peer{prev, rx}, out_local<T>{ch.dst(c, j)}, op, false)) {
        return false;
      }
      B::close_recv(ctx, from, rx);
      // an all-gather's own block: once the round's first step came (see `headers`), and after
      // it went on to the next rank
      if (!rs && t == 1 && ch.dst(r, j) != ch.src(r, j) &&
          !pass<T>(ctx, ch.len(r, j), in_local<T>{ch.src(r, j)}, out_local<T>{ch.dst(r, j)}, op, false))
        return false;
    }
  }
  return ctx.finish(rounds * per_round + (headers ? 1 : 0));
}

template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_reduce_ring(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                            const Op& op) {
  const ring_chunks_all_reduce<T> ch{in, out, ctx.template partition<T>(count), ctx.world(),
                                     ctx.template piece_elems<T>()};
  return ring<T>(ctx, ch, true, true, op);
}

template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool reduce_scatter_ring(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                                const Op& op) {
  const ring_chunks_blocks<T> ch{
      in, out, ctx.template partition<T>(count), count, ctx.template piece_elems<T>(), true};
  return ring<T>(ctx, ch, true, false, op);
}

template <class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_gather_ring(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                            const Op& op) {
  const ring_chunks_blocks<T> ch{
      in, out, ctx.template partition<T>(count), count, ctx.template piece_elems<T>(), false};
  return ring<T>(ctx, ch, false, true, op);
}

} // namespace ark::algorithms
