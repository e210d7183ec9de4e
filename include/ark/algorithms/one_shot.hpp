// ark/algorithms/one_shot.hpp: one-shot all-reduce.
//
// Reading order (docs/architecture.md, "one-shot"): every rank pushes its whole input to every
// peer, then reduces all contributions locally, in rank order, so every rank computes the same
// bits. One network trip per step: the latency choice for small messages, and at two ranks it
// moves no more bytes than a ring. Data larger than a slot goes in pipelined steps.
#pragma once

#include "ark/algorithms/pass.hpp"

#include <type_traits>
#include <utility>

namespace ark::algorithms {

/// How a call ends. Every algorithm returns with its outputs visible to the whole scope; a caller
/// whose next step is a barrier anyway (device_comm::run, whose verdict is one) may ask a latency
/// path to leave that to it: `verdict` saves the path's closing barrier (docs/perf.md).
enum class ending { barrier, verdict };

namespace detail {

/// Vectors one thread keeps in registers on the single-step LL path. GPUs' default tuning gives
/// each thread one (a worker per 4 KB, 512 threads); two would take the call over 128 registers
/// per thread, more than a 512-thread block of the user's own kernel may use.
inline constexpr std::size_t one_shot_held = 1;

/// The most elements of T a worker's share may hold to take the single-step LL path: one LL
/// step's payload, and at most one_shot_held vectors of `vec_bytes` per thread of the worker's
/// `threads`. The host computes it too (communicator::plan: call_plan::one_step).
template <class T>
ARK_HD std::size_t one_step_max_elems(const layout& l, std::size_t threads, std::size_t vec_bytes) {
  return min_of(piece_elems<T>(l, true), one_shot_held * threads * vec_bytes / sizeof(T));
}

/// Whether this worker's share takes the single-step LL path (see one_step_max_elems).
template <class T, class Ctx>
ARK_HD bool one_shot_single_step(const Ctx& ctx, elem_range mine) {
  return Ctx::backend::ll && mine.len != 0 &&
         mine.len <= one_step_max_elems<T>(ctx.lay(), ctx.g.size(), Ctx::backend::vec_bytes);
}

/// The channel type of an LL backend that names its channels before their step is known
/// (ll_packet::out_channel, in_channel, and tx/rx that take a channel in place of the peer); void
/// for one that does not.
template <class Ctx>
struct channel_of {
  using type = void;
};
template <class Ctx>
requires requires(const Ctx& c, std::uint64_t s) {
  Ctx::backend::tx(c, Ctx::backend::out_channel(c, 0), s);
  Ctx::backend::rx(c, Ctx::backend::in_channel(c, 0), 0, s);
}
struct channel_of<Ctx> {
  using type = decltype(Ctx::backend::out_channel(std::declval<const Ctx&>(), 0));
};

/// The latency path: the one-shot all-reduce of a share that fits one LL step. The protocol is
/// the pipelined path's (credit, header, packets, acknowledgement, next round), ordered so that
/// as few dependent memory round trips as possible sit on the way:
///   - our input, the round and the peers' acknowledgements are loaded together;
///   - the data packets carry the call's tag (ll_packet.hpp), so no header is polled: it is
///     read only when a packet is late, to name a mismatch, and a mismatch is known before any
///     output is stored;
///   - the contributions stay in registers, so one barrier ends the receive, and the
///     acknowledgements and the next round follow it without another.
///   - after such a call, the credits are implied by the packets it received (context::exchanged),
///     so the next call neither reads them nor needs a barrier before its stores.
/// Two barriers per call (three without implied credits; the last makes the outputs visible to
/// the scope, and is left to the caller with ending::verdict), against six on the pipelined path.
///
/// `World`: the team's size when known at compile time (0: read from the team). With it the loops
/// over peers unroll, and every peer's slot address is computed once: loops over a run-time world
/// are a measurable part of an in-kernel call (docs/perf.md); all_reduce_one_step instantiates it
/// for two ranks. Peers are visited from the next rank on (rank + 1, rank + 2, ...), so at more
/// ranks no rank is every sender's first target, and thread k writes the header of the k-th of
/// them (thread 0 the first peer's, whose packets it stores first: at two ranks, one address).
/// `Early`: each channel's address computed once per call, apart from the step (step 0 below).
template <ending E = ending::barrier, int World = 0, bool Early = (World > 1 && World <= 4), class Ctx,
          class T, class Op>
ARK_HD bool all_reduce_one_shot_ll(const Ctx& ctx, const T* in, T* out, elem_range mine, const Op& op) {
  using B = typename Ctx::backend;
  using P = typename Ctx::platform;
  constexpr std::size_t V = B::vec_bytes, H = one_shot_held;
  const std::uint64_t step = ctx.round;
  const int rank = ctx.rank(), world = World != 0 ? World : ctx.world();
  const std::size_t t = ctx.g.thread_rank(), nt = ctx.g.size();
  auto peer_after = [&](int k) { // the k-th peer after us, k in [0, world - 1)
    const int p = rank + 1 + k;
    return p >= world ? p - world : p;
  };
  const std::size_t bytes = mine.len * sizeof(T), nv = div_up(bytes, V);
  const auto* src = reinterpret_cast<const std::byte*>(in + mine.begin);
  auto* dst = reinterpret_cast<std::byte*>(out + mine.begin);

  // 0. `Early` (with the team's size known and a backend that names its channels, ll_packet):
  // every channel's address without its step, computed once here, not again after each store's
  // memory clobber (where the compiler places that work is its choice). It pays inside a
  // persistent kernel only: a launched call gains nothing, and the kernel the host launches for
  // one_step (its dispatch to two ranks) is slower with it, so that dispatch leaves it off
  // (docs/perf.md). Up to four ranks (a few registers a peer); in rank order for the receiving
  // side, so that the unrolled loops index them with constants (our own rank's is unused)
  using channel = typename channel_of<Ctx>::type;
  constexpr bool early = Early && World > 1 && World <= 4 && !std::is_void_v<channel>;
  [[maybe_unused]] std::conditional_t<early, channel, int> out_ch[early ? World - 1 : 1]{};
  [[maybe_unused]] std::conditional_t<early, channel, int> in_ch[early ? World : 1]{};
  if constexpr (early) {
    for (int k = 0; k + 1 < World; ++k) out_ch[k] = B::out_channel(ctx, peer_after(k));
    for (int r = 0; r < World; ++r) in_ch[r] = B::in_channel(ctx, r);
  }
  auto tx = [&](int k) {
    if constexpr (early)
      return B::tx(ctx, out_ch[k], step);
    else
      return B::tx(ctx, peer_after(k), step);
  };
  auto rx = [&](int r) {
    if constexpr (early)
      return B::rx(ctx, in_ch[r], r, step);
    else
      return B::rx(ctx, r, step);
  };
  // the headers, where credits are implied (open_send writes them otherwise)
  auto write_headers = [&] {
    for (std::size_t k = t; k + 1 < static_cast<std::size_t>(world); k += nt) {
      if constexpr (early) {
        for (int c = 0; c + 1 < World; ++c) // a constant index keeps the channels in registers
          if (static_cast<std::size_t>(c) == k) B::write_header(ctx, tx(c));
      } else {
        B::write_header(ctx, peer_after(static_cast<int>(k)), step);
      }
    }
  };

  // 1. our vectors, in flight with the credits open_send reads. Credits are implied after a call
  // that exchanged packets with every peer in one step (ctx.exchanged): each peer sent them once
  // done reading every earlier step, and a channel has at least two slots (max_depth + 1), so
  // this step's slot is one of those. The round word says so: no flag to read, and no barrier to
  // spread its verdict
  vec<V> own[H]{};
  for (std::size_t j = 0; j < H; ++j)
    if (t + j * nt < nv) own[j] = dma::load_prefix<P, V>(src + V * (t + j * nt), bytes - V * (t + j * nt));
  if (ctx.failed_before) return false; // see dma::wait_credit; every thread read the same word
  if (!ctx.exchanged) {
    if (!B::open_send(ctx, dma::peers::all(), step)) return false;
  } else if constexpr (!early) {
    write_headers();
  }

  // 2. packets to every peer. Early, with implied credits, the headers after them (a peer reads a
  // header only when a packet is late, to name a mismatch)
  for (std::size_t j = 0; j < H && t + j * nt < nv; ++j)
    for (int k = 0; k + 1 < world; ++k) tx(k).store(t + j * nt, own[j]);
  if constexpr (early) {
    if (ctx.exchanged) write_headers();
  }

  // 3. every peer's packets, folded in rank order. A packet that carries our call's tag is of a
  // call like ours (ll_packet.hpp): no header is read unless one is late
  bool ok = true;
  acc_lanes<T, V> acc[H]{};
  for (std::size_t j = 0; ok && j < H && t + j * nt < nv; ++j)
    for (int r = 0; r < world; ++r) {
      vec<V> v = own[j];
      if (r != rank && !(ok = rx(r).load(ctx, t + j * nt, v))) break;
      if (r == 0)
        acc[j] = widen<T>(v);
      else
        fold(acc[j], v, op);
    }
  if (ctx.g.sync_any(!ok)) return false;
  // every thread read the round before this barrier (with implied credits, none came before);
  // every peer's packets of this step came: credits implied for the next call
  if (t == 0) ctx.lay().state(ctx.local(), ctx.worker)->round = (step + 1) | worker_state::exchanged_bit;

  // 4. outputs; the slot is free again (every thread's loads completed before the barrier)
  for (std::size_t j = 0; j < H && t + j * nt < nv; ++j) {
    if constexpr (finalizing_op<Op, T>)
      for (std::size_t e = 0; e < acc[j].n; ++e) acc[j].v[e] = op.finalize(acc[j].v[e], world);
    dma::store_prefix<P, V>(dst + V * (t + j * nt), narrow<T>(acc[j]), bytes - V * (t + j * nt));
  }
  dma::raise_acks(ctx, dma::peers::all(), step);    // after the barrier that ended every load
  if constexpr (E == ending::barrier) ctx.g.sync(); // return with the outputs visible to the scope
  return true;
}

} // namespace detail

template <ending E = ending::barrier, class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_reduce_one_shot(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                                const Op& op) {
  using B = typename Ctx::backend;
  const dma::peers all = dma::peers::all();
  if constexpr (B::ll) {
    const elem_range mine = ctx.template partition<T>(count);
    if (detail::one_shot_single_step<T>(ctx, mine))
      return detail::all_reduce_one_shot_ll<E>(ctx, in, out, mine, op);
  }
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

/// The one-shot all-reduce of shares that fit one LL step, alone (algo::one_step): the latency
/// path of all_reduce_one_shot without its pipelined path compiled beside it. That path's code,
/// though never run for such shares, slows a call inside a persistent kernel (docs/perf.md).
/// The protocol is one_shot's, so a rank's one_step call meets a peer's one_shot call of the same
/// count over the same backend and workers. A share that does not fit (one_step_max_elems) fails
/// the call with errc::unsupported, alike on every rank that calls one_step (a peer on one_shot
/// would wait for it: a timeout); an empty share returns at once.
/// `World` (algo::one_step_world): the team's size, fixed when the kernel is compiled; only that
/// size's path is compiled, and a team of another size fails the call with errc::unsupported.
/// 0: any size; two ranks take a path of their own (without all_reduce_one_shot_ll's `Early`,
/// which slows this kernel, launched from the host).
template <ending E = ending::barrier, int World = 0, class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool all_reduce_one_step(const Ctx& ctx, const T* in, T* out, std::size_t count,
                                                const Op& op) {
  static_assert(Ctx::backend::ll, "ark: algo::one_step runs over LL packets (dma::ll_packet)");
  if constexpr (World != 0) {
    if (ctx.world() != World) {
      if (ctx.g.thread_rank() == 0)
        ctx.fail(errc::unsupported, static_cast<std::uint32_t>(unsupported_kind::world), -1, ctx.round,
                 static_cast<std::uint64_t>(World), static_cast<std::uint64_t>(ctx.world()));
      return false;
    }
  }
  const elem_range mine = ctx.template partition<T>(count);
  if (mine.len == 0) return true;
  if (!detail::one_shot_single_step<T>(ctx, mine)) {
    if (ctx.g.thread_rank() == 0)
      ctx.fail(errc::unsupported, static_cast<std::uint32_t>(unsupported_kind::one_step), -1, ctx.round,
               mine.len, detail::one_step_max_elems<T>(ctx.lay(), ctx.g.size(), Ctx::backend::vec_bytes));
    return false;
  }
  if constexpr (World != 0)
    return detail::all_reduce_one_shot_ll<E, World>(ctx, in, out, mine, op);
  else
    return ctx.world() == 2 ? detail::all_reduce_one_shot_ll<E, 2, false>(ctx, in, out, mine, op)
                            : detail::all_reduce_one_shot_ll<E>(ctx, in, out, mine, op);
}

} // namespace ark::algorithms
