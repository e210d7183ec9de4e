// ark/algorithms/zero_copy.hpp: all-reduce, reduce-scatter and all-gather over symmetric buffers
// (team/symmetric.hpp), read where they lie.
//
// Reading order (docs/architecture.md, "zero-copy"): when every rank's buffers lie at the same
// place of a registered window, a rank reads its peers' buffers in place and no byte passes
// through the scratch slots; the channels carry headers alone, which pace the phases
// (dma::handshake) and check that every rank makes the same call on buffers at the same place
// before anything is stored. All-reduce: each rank reduces its chunk of the worker's share from
// every rank's input (in rank order, so every rank gets the same bits) and stores the result
// into every rank's output. Reduce-scatter reduces its own block into its own output; all-gather
// copies every rank's input into its own output. Two handshakes a call: the first says every
// rank's buffers are ready, the second, after the stores, that no peer reads or writes ours any
// more: when a call returns, the caller may use its buffers again.
// In place is served: a rank reads and writes only its own chunk of every rank's buffer (all-reduce),
// only its own block of its buffer (reduce-scatter), or reads the peers' blocks and writes the
// same blocks of its own buffer, which no peer reads (all-gather), each element read before the
// same thread writes it.
//
// Over an engine backend (not `direct`: dma::proxy_engine's copy engines, dma::tma) the engine
// moves what needs no reduction and the SM's threads only reduce: all-gather pulls every peer's
// block from its input into our output with engine copies (no SM thread touches a byte);
// all-reduce reduces our chunk into our own output, then pushes it from there into every peer's
// output with engine copies. The same chunks, read and written by the same rank as above, so in
// place stays served: the pushes read our chunk after every thread of the block stored it
// (the block barrier, and the backend's publish for an engine reading through another proxy).
// Reduce-scatter has nothing an engine can move (every byte it writes is a reduction): it runs
// as over thread copies. A copy engine cannot reduce, so a reduction always reads the peers'
// inputs in place with the SM's threads.
#pragma once

#include "ark/algorithms/pass.hpp"

namespace ark::algorithms {

namespace detail {
/// The frame every zero-copy call shares: this worker's share of `count` elements, the first
/// handshake (every rank's buffers ready, and lying at `in_place` and `out_place` as ours do),
/// body(share) (false: it failed), and the second handshake (no peer reads or writes ours any more). A share
/// of none (the same on every rank) takes no step and waits for nobody.
template <class T, class Ctx, class Body>
ARK_HD bool zero_copy_frame(const Ctx& ctx, std::size_t count, std::uint64_t in_place,
                            std::uint64_t out_place, Body&& body) {
  const elem_range share = ctx.template partition<T>(count);
  if (share.len == 0) return ctx.finish(0);
  if (!dma::handshake(ctx, ctx.round, {in_place, out_place})) return false;
  if (!body(share)) return false;
  return dma::handshake(ctx, ctx.round + 1, {0, 0}) && ctx.finish(2, true);
}

/// Engine backends: `each(copy)` names the copies, copy(dst, src, bytes), which one thread posts
/// in that order; returns once the engine completed them all. Every thread's stores made before
/// are ordered before the engine's reads. False after a post or the wait for completion failed.
template <class Ctx, class Each>
ARK_HD bool engine_copies(const Ctx& ctx, Each&& each) {
  using B = typename Ctx::backend;
  if constexpr (requires { B::publish_staging(); }) B::publish_staging();
  ctx.g.sync();
  bool ok = true;
  if (ctx.g.thread_rank() == 0)
    ok = each([&](void* dst, const void* src, std::size_t bytes) {
      return bytes == 0 || B::post(ctx, dst, src, bytes, nullptr, 0);
    });
  if (ctx.g.sync_any(!ok)) return false;
  return B::flush(ctx);
}
} // namespace detail

/// All-reduce of `count` elements: out = in reduced over all ranks. Both buffers symmetric: each
/// rank reduces its chunk of the share from every input and stores it into every output.
template <class Ctx, class T, class Op>
ARK_HD bool all_reduce_zero_copy(const Ctx& ctx, symmetric<const T> in, symmetric<T> out, std::size_t count,
                                 const Op& op) {
  return detail::zero_copy_frame<T>(ctx, count, in.place, out.place, [&](elem_range share) {
    const elem_range mine =
        split(share, static_cast<unsigned>(ctx.world()), static_cast<unsigned>(ctx.rank()), align_elems<T>);
    if constexpr (Ctx::backend::direct) {
      pass<T>(ctx, mine.len, in_symmetric<T>{in + mine.begin}, out_symmetric<T>{out + mine.begin}, op, true);
      return true;
    } else {
      T* const own = out.local + mine.begin;
      pass<T>(ctx, mine.len, in_symmetric<T>{in + mine.begin}, out_local<T>{own}, op, true);
      return detail::engine_copies(ctx, [&](auto copy) {
        for (int k = 1; k < ctx.world(); ++k) {
          const int r = (ctx.rank() + k) % ctx.world();
          if (!copy(out.on(r) + mine.begin, own, mine.len * sizeof(T))) return false;
        }
        return true;
      });
    }
  });
}

/// Reduce-scatter: out (count elements) = block `rank` of in (world blocks) reduced over all
/// ranks. The input symmetric; the output this rank's alone.
template <class Ctx, class T, class Op>
ARK_HD bool reduce_scatter_zero_copy(const Ctx& ctx, symmetric<const T> in, T* out, std::size_t count,
                                     const Op& op) {
  return detail::zero_copy_frame<T>(ctx, count, in.place, 0, [&](elem_range share) {
    const std::size_t at = static_cast<std::size_t>(ctx.rank()) * count + share.begin;
    pass<T>(ctx, share.len, in_symmetric<T>{in + at}, out_local<T>{out + share.begin}, op, true);
    return true;
  });
}

/// All-gather: block r of out (world blocks of count) = rank r's input. `in` symmetric, the
/// output this rank's alone; in place (in.local == out), `in` is the output's own symmetric view
/// and rank r's input its block r, where an in-place all-gather's inputs lie.
template <class Ctx, class T, class Op>
ARK_HD bool all_gather_zero_copy(const Ctx& ctx, symmetric<const T> in, T* out, std::size_t count,
                                 const Op& op) {
  const int world = ctx.world(), rank = ctx.rank();
  const bool in_place = in.local == out;
  return detail::zero_copy_frame<T>(ctx, count, in.place, 0, [&](elem_range share) {
    // block r of our output, and where rank r's input holds it
    auto each_block = [&](auto&& move) {
      for (int k = in_place ? 1 : 0; k < world; ++k) {
        const int r = (rank + k) % world;
        const std::size_t block = static_cast<std::size_t>(r) * count + share.begin;
        if (!move(out + block, in.on(r) + (in_place ? block : share.begin))) return false;
      }
      return true;
    };
    if constexpr (Ctx::backend::direct)
      return each_block([&](T* dst, const T* src) {
        pass<T>(ctx, share.len, in_remote<T>{src}, out_local<T>{dst}, op, false);
        return true;
      });
    else
      return detail::engine_copies(ctx, [&](auto copy) {
        return each_block([&](T* dst, const T* src) { return copy(dst, src, share.len * sizeof(T)); });
      });
  });
}

/// Runs collective K (all_reduce, reduce_scatter or all_gather) zero-copy.
template <collective K, class Ctx, class T, class Out, class Op>
ARK_HD bool run_zero_copy(const Ctx& ctx, symmetric<const T> in, Out out, std::size_t count, const Op& op) {
  if constexpr (K == collective::all_reduce)
    return all_reduce_zero_copy(ctx, in, out, count, op);
  else if constexpr (K == collective::reduce_scatter)
    return reduce_scatter_zero_copy(ctx, in, out, count, op);
  else
    return all_gather_zero_copy(ctx, in, out, count, op);
}

} // namespace ark::algorithms
