// ark/algorithms/pass.hpp: the one loop every algorithm runs.
//
// A pass walks n elements in vectors of the backend's width. For each vector it folds its inputs
// (local buffers and received steps, in a fixed order) with the reduction op, optionally finalizes
// (avg divides by the world size), and stores the result to its outputs (local buffers and the
// steps it sends). Inputs and outputs are small descriptor types, so each algorithm's pass
// compiles to straight-line code for its case. Local buffers are never read or written past n;
// slots are padded, so peers' steps move whole vectors.
#pragma once

#include "ark/concepts/reduce_op.hpp"
#include "ark/dma/common.hpp"
#include "ark/team/symmetric.hpp"

namespace ark::algorithms {

// Inputs ------------------------------------------------------------------------------------------
template <class T>
struct in_local { ///< a local buffer
  const T* p;
};
struct in_peer { ///< the step a peer sent us
  int peer;
  std::uint64_t step;
};
template <class T>
struct in_local_peer { ///< a local buffer folded with the step a peer sent us
  const T* p;
  int peer;
  std::uint64_t step;
};
template <class T>
struct in_all_ranks { ///< every rank's contribution in rank order: ours from p, the others' received
  const T* p;
  std::uint64_t step;
};
template <class T>
struct in_symmetric { ///< every rank's copy of a symmetric buffer, read in place, in rank order
  symmetric<const T> p;
};
template <class T>
struct in_remote { ///< a peer's buffer, read in place
  const T* p;
};

// Outputs -----------------------------------------------------------------------------------------
template <class T>
struct out_local { ///< a local buffer
  T* p;
};
struct out_peer { ///< the step we send a peer
  int peer;
  std::uint64_t step;
};
template <class T>
struct out_local_peer { ///< a local buffer and the step we send a peer
  T* p;
  int peer;
  std::uint64_t step;
};
template <class T>
struct out_local_all { ///< a local buffer and the step we send every peer
  T* p;
  std::uint64_t step;
};
template <class T>
struct out_symmetric { ///< every rank's copy of a symmetric buffer, written in place
  symmetric<T> p;
};

namespace detail {

template <class T, std::size_t V>
ARK_HD ARK_FORCEINLINE acc_lanes<T, V> widen(const vec<V>& v) {
  const lanes<T, V> l = as_lanes<T>(v);
  acc_lanes<T, V> a;
  for (std::size_t e = 0; e < a.n; ++e) a.v[e] = to_acc(l.v[e]);
  return a;
}

template <class T, std::size_t V>
ARK_HD ARK_FORCEINLINE vec<V> narrow(const acc_lanes<T, V>& a) {
  lanes<T, V> l;
  for (std::size_t e = 0; e < a.n; ++e) l.v[e] = from_acc<T>(a.v[e]);
  return as_vec(l);
}

template <class T, std::size_t V, class Op>
ARK_HD ARK_FORCEINLINE void fold(acc_lanes<T, V>& acc, const vec<V>& v, const Op& op) {
  const acc_lanes<T, V> b = widen<T>(v);
  for (std::size_t e = 0; e < acc.n; ++e) acc.v[e] = op(acc.v[e], b.v[e]);
}

/// The pieces of one vector of a pass: which vector, and how many of its bytes are valid.
struct cursor {
  std::size_t i;
  std::size_t valid; // bytes of this vector inside the pass (the last one may be partial)
};

template <class Ctx, class T, std::size_t V>
ARK_HD ARK_FORCEINLINE vec<V> load_local(const T* p, cursor c) {
  return dma::load_prefix<typename Ctx::platform, V>(reinterpret_cast<const std::byte*>(p) + c.i * V,
                                                     c.valid);
}

template <class Ctx, class T, std::size_t V>
ARK_HD ARK_FORCEINLINE void store_local(T* p, cursor c, const vec<V>& v) {
  dma::store_prefix<typename Ctx::platform, V>(reinterpret_cast<std::byte*>(p) + c.i * V, v, c.valid);
}

template <class Ctx, class T, std::size_t V>
ARK_HD ARK_FORCEINLINE vec<V> load_remote(const T* p, cursor c) {
  return dma::load_peer_prefix<typename Ctx::platform, V>(reinterpret_cast<const std::byte*>(p) + c.i * V,
                                                          c.valid);
}

// Loading an input: returns false if a received step never arrived (LL polling timed out).
template <class Ctx, class T, std::size_t V, class Op>
ARK_HD bool load(const Ctx&, const in_local<T>& in, cursor c, acc_lanes<T, V>& acc, const Op&) {
  acc = widen<T>(load_local<Ctx, T, V>(in.p, c));
  return true;
}

template <class Ctx, class T, std::size_t V, class Op>
ARK_HD bool load(const Ctx& ctx, const in_peer& in, cursor c, acc_lanes<T, V>& acc, const Op&) {
  vec<V> v;
  if (!Ctx::backend::rx(ctx, in.peer, in.step).load(ctx, c.i, v)) return false;
  acc = widen<T>(v);
  return true;
}

template <class Ctx, class T, std::size_t V, class Op>
ARK_HD bool load(const Ctx& ctx, const in_local_peer<T>& in, cursor c, acc_lanes<T, V>& acc, const Op& op) {
  vec<V> v;
  if (!Ctx::backend::rx(ctx, in.peer, in.step).load(ctx, c.i, v)) return false;
  acc = widen<T>(load_local<Ctx, T, V>(in.p, c));
  fold(acc, v, op);
  return true;
}

/// Folds every rank's vector into acc in rank order (so every rank computes the same bits):
/// get(r, v) loads rank r's, false if it never arrived.
template <class Ctx, class T, std::size_t V, class Op, class Get>
ARK_HD ARK_FORCEINLINE bool fold_ranks(const Ctx& ctx, acc_lanes<T, V>& acc, const Op& op, Get&& get) {
  for (int r = 0; r < ctx.world(); ++r) {
    vec<V> v;
    if (!get(r, v)) return false;
    if (r == 0)
      acc = widen<T>(v);
    else
      fold(acc, v, op);
  }
  return true;
}

template <class Ctx, class T, std::size_t V, class Op>
ARK_HD bool load(const Ctx& ctx, const in_all_ranks<T>& in, cursor c, acc_lanes<T, V>& acc, const Op& op) {
  return fold_ranks<Ctx, T>(ctx, acc, op, [&](int r, vec<V>& v) {
    if (r != ctx.rank()) return Ctx::backend::rx(ctx, r, in.step).load(ctx, c.i, v);
    v = load_local<Ctx, T, V>(in.p, c);
    return true;
  });
}

template <class Ctx, class T, std::size_t V, class Op>
ARK_HD bool load(const Ctx& ctx, const in_symmetric<T>& in, cursor c, acc_lanes<T, V>& acc, const Op& op) {
  return fold_ranks<Ctx, T>(ctx, acc, op, [&](int r, vec<V>& v) {
    v = r == ctx.rank() ? load_local<Ctx, T, V>(in.p.local, c) : load_remote<Ctx, T, V>(in.p.on(r), c);
    return true;
  });
}

template <class Ctx, class T, std::size_t V, class Op>
ARK_HD bool load(const Ctx&, const in_remote<T>& in, cursor c, acc_lanes<T, V>& acc, const Op&) {
  acc = widen<T>(load_remote<Ctx, T, V>(in.p, c));
  return true;
}

// Storing an output.
template <class Ctx, class T, std::size_t V>
ARK_HD void store(const Ctx&, const out_local<T>& out, cursor c, const vec<V>& v) {
  store_local<Ctx, T, V>(out.p, c, v);
}

template <class Ctx, class T, std::size_t V>
ARK_HD void store(const Ctx& ctx, const out_peer& out, cursor c, const vec<V>& v) {
  Ctx::backend::tx(ctx, out.peer, out.step).store(c.i, v);
}

template <class Ctx, class T, std::size_t V>
ARK_HD void store(const Ctx& ctx, const out_local_peer<T>& out, cursor c, const vec<V>& v) {
  store_local<Ctx, T, V>(out.p, c, v);
  Ctx::backend::tx(ctx, out.peer, out.step).store(c.i, v);
}

template <class Ctx, class T, std::size_t V>
ARK_HD void store(const Ctx& ctx, const out_local_all<T>& out, cursor c, const vec<V>& v) {
  store_local<Ctx, T, V>(out.p, c, v);
  for (int p = 0; p < ctx.world(); ++p)
    if (p != ctx.rank()) Ctx::backend::tx(ctx, p, out.step).store(c.i, v);
}

template <class Ctx, class T, std::size_t V>
ARK_HD void store(const Ctx& ctx, const out_symmetric<T>& out, cursor c, const vec<V>& v) {
  for (int k = 0; k < ctx.world(); ++k) { // from our own copy on, so that no rank is every rank's first
    const int r = ctx.rank() + k < ctx.world() ? ctx.rank() + k : ctx.rank() + k - ctx.world();
    store_local<Ctx, T, V>(k == 0 ? out.p.local : out.p.on(r), c, v);
  }
}

} // namespace detail

/// Runs a pass over n elements of T. Scope-collective when the backend polls (LL): then every
/// thread learns whether any input timed out. Returns false on such a timeout (already recorded).
template <class T, class Ctx, class In, class Out, class Op>
ARK_HD bool pass(const Ctx& ctx, std::size_t n, const In& in, const Out& out, const Op& op, bool finalize) {
  constexpr std::size_t V = Ctx::backend::vec_bytes;
  const std::size_t bytes = n * sizeof(T);
  const std::size_t nv = div_up(bytes, V);
  bool ok = true;
  for (std::size_t i = ctx.g.thread_rank(); i < nv; i += ctx.g.size()) {
    const detail::cursor c{i, bytes - i * V};
    acc_lanes<T, V> acc{};
    if (!detail::load<Ctx, T, V>(ctx, in, c, acc, op)) {
      ok = false;
      break;
    }
    if constexpr (finalizing_op<Op, T>) {
      if (finalize)
        for (std::size_t e = 0; e < acc.n; ++e) acc.v[e] = op.finalize(acc.v[e], ctx.world());
    }
    detail::store<Ctx, T, V>(ctx, out, c, detail::narrow<T>(acc));
  }
  if constexpr (Ctx::backend::ll)
    return !ctx.g.sync_any(!ok);
  else
    return ok;
}

/// A step of headers alone: every rank writes its call's description into every peer's slot for
/// `step` (send_headers) and checks every peer's (check_headers). A receiver checks the header
/// of each step it opens, before it stores anything from it; a collective in which a rank opens
/// no step of some peer's before its first output store (a broadcast's root; a reduce's other
/// ranks, which store nothing but would finish without an error; a ring all-gather at more than
/// two ranks, which stores each block as it forwards it but hears of its last peer only at the
/// round's last hop) opens with such a step, so that a call that differs from any rank's fails
/// on every rank before any output is stored. In two halves, so that the caller's first data
/// step travels while it waits. Both scope-collective.
template <class Ctx>
ARK_HD bool send_headers(const Ctx& ctx, std::uint64_t step) {
  using B = typename Ctx::backend;
  const dma::peers all = dma::peers::all();
  return B::open_send(ctx, all, step) && B::close_send(ctx, all, step, 0);
}
template <class Ctx>
ARK_HD bool check_headers(const Ctx& ctx, std::uint64_t step) {
  using B = typename Ctx::backend;
  const dma::peers all = dma::peers::all();
  if (!B::open_recv(ctx, all, step)) return false;
  B::close_recv(ctx, all, step);
  return true;
}

/// Walks this worker's share of `count` elements in slot-sized pieces, one pipeline step each:
/// send(off, n, step) pushes a piece to the peers, consume(off, n, step) waits for the peers' piece
/// and uses it. Sends run Depth steps ahead of consumption, so later pieces travel while earlier
/// ones are reduced. Ends the call with the number of steps used.
/// `received_every_step`: every step of this worker received from every peer (see finish()).
/// `headers`: the pieces' steps follow a step of headers alone (send_headers), checked before
/// the first consume: for collectives whose consume does not open every peer's step.
template <class T, class Ctx, class Send, class Consume>
ARK_HD bool pipeline_pieces(const Ctx& ctx, std::size_t count, Send&& send, Consume&& consume,
                            bool received_every_step = false, bool headers = false) {
  const elem_range mine = ctx.template partition<T>(count);
  const std::size_t piece = ctx.template piece_elems<T>();
  const std::uint64_t steps = div_up(mine.len, piece);
  const std::uint64_t ahead = min_of<std::uint64_t>(Ctx::backend::depth, steps);
  headers = headers && steps != 0;
  const std::uint64_t first = ctx.round + (headers ? 1 : 0);
  auto at = [&](std::uint64_t j, auto& f) {
    const std::size_t off = mine.begin + j * piece;
    return f(off, min_of(piece, mine.end() - off), first + j);
  };
  if (headers && !send_headers(ctx, ctx.round)) return false;
  for (std::uint64_t j = 0; j < ahead; ++j)
    if (!at(j, send)) return false;
  if (headers && !check_headers(ctx, ctx.round)) return false;
  for (std::uint64_t j = 0; j < steps; ++j)
    if (!at(j, consume) || (j + ahead < steps && !at(j + ahead, send))) return false;
  return ctx.finish(steps + (headers ? 1 : 0), received_every_step);
}

} // namespace ark::algorithms
