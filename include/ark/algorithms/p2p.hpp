// ark/algorithms/p2p.hpp: point-to-point: a group of sends and receives, each between this rank
// and one peer, run by the communicator's point-to-point workers (layout::p2p).
//
// Only the two ranks of a send take part in it, so a point-to-point worker cannot count its
// steps per call, as the collectives' workers do (every rank makes every collective call): it
// counts them per peer and direction (layout::pair_step). The two directions between a pair use
// separate flags and slots (ours: head and slots written by the peer, its ack written by us; its
// the other way round), so each direction's count is all two ranks need to agree on, and they
// do when they make matching sends and receives in the same order.
//
// A group runs in rounds over the positions of its steps in each direction (the operations of one
// direction follow each other, in the order listed): round j consumes the step at position j of
// every direction it receives on, then sends the one at j + Depth of every direction it sends on
// (positions 0 .. Depth - 1 go first). A send at j + Depth waits for its receiver to have consumed
// position j - 1, which that rank does in its round j - 1; a receive at j waits for a send its
// peer made in round j - Depth. Every wait is on an earlier round of some rank, so any mix of
// sends and receives between any ranks completes, in whatever order each rank listed them (a
// rank that sends to and receives from the same peer; a ring shift; all pairs).
//
// Every operation takes at least one step, its header alone when its share is empty, so that a
// count or dtype that differs between the two sides is a mismatch error on both. A send ends once
// its receiver consumed its last step (a bounded wait): a send without its receive is a timeout
// error, never a message left in a slot.
#pragma once

#include "ark/algorithms/pass.hpp"

namespace ark {

/// One operation of a point-to-point group.
struct p2p_op {
  static constexpr std::uint8_t send = 0; ///< `buf` (count elements) to `peer`
  static constexpr std::uint8_t recv = 1; ///< `count` elements from `peer` into `buf`
  /// A send to this very rank matched with its receive: `src` copied into `buf`.
  static constexpr std::uint8_t self = 2;
  std::uint64_t buf = 0; ///< the address sent from or received into
  std::uint64_t src = 0; ///< self: the address copied from
  std::uint64_t count = 0;
  std::int32_t peer = 0;
  std::uint8_t kind = send;
  std::uint8_t dtype = 0;
  std::uint8_t elem = 1; ///< bytes per element
};

/// A send or receive (kind) of `count` elements of T at `buf` with `peer`.
template <class T>
ARK_HD p2p_op make_p2p_op(std::uint8_t kind, const T* buf, std::size_t count, int peer) {
  p2p_op o;
  o.buf = reinterpret_cast<std::uint64_t>(buf);
  o.count = count;
  o.peer = peer;
  o.kind = kind;
  o.dtype = static_cast<std::uint8_t>(dtype_of<T>);
  o.elem = sizeof(T);
  return o;
}

/// The most operations one group holds: they travel in the launch's arguments.
inline constexpr unsigned p2p_max_ops = layout::p2p_group_most;

/// A group's operations, by value (a kernel's argument).
struct p2p_ops {
  p2p_op op[p2p_max_ops];
  unsigned n = 0;
};

namespace algorithms {

/// The description both sides of operation `o` write and check: the same for a send and its
/// receive.
template <class B>
ARK_HD call_desc describe_p2p(const p2p_op& o, unsigned workers) {
  return call_desc::make(collective::p2p, 0, o.dtype, 0, B::id, workers, 0, o.count);
}

/// Runs the group of `n` operations at `list` (at most p2p_max_ops) on point-to-point worker
/// `worker` of `workers` (the launch's blocks), over backend B. Scope-collective. Returns false
/// after a failure, recorded on this rank.
template <class B, device P, scope G>
ARK_HD bool run_p2p(G& g, const team_view& t, unsigned worker, unsigned workers, const p2p_op* list,
                    unsigned n) {
  const layout& l = t.lay;
  const unsigned w = l.p2p_worker(worker);
  std::byte* const me = t.local();
  const bool failed = (l.state(me, w)->round & worker_state::failed_bit) != 0;
  using ctx_t = context<P, B, G>;
  auto ctx_of = [&](const p2p_op& o, std::uint64_t first) {
    return ctx_t::at_step(g, t, w, workers, describe_p2p<B>(o, workers), first, failed);
  };
  const std::size_t piece = ark::piece_elems<std::uint8_t>(l, B::ll); // bytes per step
  auto share = [&](const p2p_op& o) { return split({0, o.count * o.elem}, workers, worker, 16); };
  // the plan: each operation's steps (at least one: its header), and where they begin in its
  // direction: after the group's earlier operations in the same direction (at `pos` of the
  // group's steps there), so at the direction's next step + pos (`first`); and the rounds. Thread
  // 0 writes it into the worker's plan in the region (layout::p2p_plan, not per-thread arrays);
  // every thread reads it after the barrier.
  std::uint64_t* const steps = l.p2p_plan(me, worker);
  std::uint64_t* const pos = steps + p2p_max_ops;
  std::uint64_t* const first = pos + p2p_max_ops;
  std::uint64_t* const most = first + p2p_max_ops;
  if (g.thread_rank() == 0) {
    *most = 0;
    for (unsigned i = 0; i < n; ++i) {
      const p2p_op& o = list[i];
      const std::uint64_t k_steps = div_up(share(o).len, piece);
      steps[i] = o.kind == p2p_op::self ? 0 : k_steps ? k_steps : 1;
      pos[i] = first[i] = 0;
      if (o.kind == p2p_op::self) continue;
      unsigned k = i;
      while (k-- > 0)
        if (list[k].peer == o.peer && list[k].kind == o.kind) break;
      pos[i] = k < i ? pos[k] + steps[k] : 0;
      first[i] = k < i ? first[k] + steps[k] : *l.pair_step(me, worker, o.peer, o.kind == p2p_op::recv);
      *most = *most < pos[i] + steps[i] ? pos[i] + steps[i] : *most;
    }
  }
  g.sync();
  const std::uint64_t rounds = *most;

  bool ok = true;
  const ctx_t any = ctx_t::at_step(g, t, w, workers, call_desc{}, 0, failed);
  // copies to this rank: local, once every thread is here
  for (unsigned i = 0; i < n; ++i) {
    const p2p_op& o = list[i];
    if (o.kind != p2p_op::self || o.src == o.buf) continue;
    const elem_range r = share(o);
    dma::group_copy(any, reinterpret_cast<std::byte*>(o.buf) + r.begin,
                    reinterpret_cast<const std::byte*>(o.src) + r.begin, r.len);
  }
  // step j of operation i: where its bytes lie in the buffer, and how many
  auto piece_of = [&](unsigned i, std::uint64_t j) {
    const elem_range r = share(list[i]);
    const std::size_t off = min_of<std::size_t>(j * piece, r.len);
    return elem_range{r.begin + off, min_of(piece, r.len - off)};
  };
  auto send_step = [&](unsigned i, std::uint64_t j) {
    const p2p_op& o = list[i];
    const ctx_t ctx = ctx_of(o, first[i]);
    const elem_range b = piece_of(i, j);
    const dma::peers to = dma::peers::only(o.peer);
    if (b.len == 0) return B::open_send(ctx, to, ctx.round + j) && B::close_send(ctx, to, ctx.round + j, 0);
    return B::send(ctx, to, ctx.round + j, reinterpret_cast<const std::byte*>(o.buf) + b.begin, b.len);
  };
  auto recv_step = [&](unsigned i, std::uint64_t j) {
    const p2p_op& o = list[i];
    const ctx_t ctx = ctx_of(o, first[i]);
    const elem_range b = piece_of(i, j);
    const dma::peers from = dma::peers::only(o.peer);
    const std::uint64_t s = ctx.round + j;
    if (!B::open_recv(ctx, from, s) ||
        !pass<std::uint8_t>(ctx, b.len, in_peer{o.peer, s},
                            out_local<std::uint8_t>{reinterpret_cast<std::uint8_t*>(o.buf) + b.begin},
                            op::sum{}, false))
      return false;
    B::close_recv(ctx, from, s);
    return true;
  };
  // round r: the step at position r of every direction we receive on, then the step at r + Depth
  // of every direction we send on (positions 0 .. Depth - 1 first)
  auto at = [&](unsigned i, std::uint64_t r) { return r >= pos[i] && r < pos[i] + steps[i]; };
  for (std::uint64_t r = 0; ok && r < B::depth && r < rounds; ++r)
    for (unsigned i = 0; ok && i < n; ++i)
      if (list[i].kind == p2p_op::send && at(i, r)) ok = send_step(i, r - pos[i]);
  for (std::uint64_t r = 0; ok && r < rounds; ++r) {
    for (unsigned i = 0; ok && i < n; ++i)
      if (list[i].kind == p2p_op::recv && at(i, r)) ok = recv_step(i, r - pos[i]);
    for (unsigned i = 0; ok && i < n; ++i)
      if (list[i].kind == p2p_op::send && at(i, r + B::depth)) ok = send_step(i, r + B::depth - pos[i]);
  }
  // a send ends once its receiver consumed its last step
  for (unsigned i = 0; ok && i < n; ++i)
    if (list[i].kind == p2p_op::send)
      ok = dma::wait_flag(any, l.ack(me, any.in_link(list[i].peer)), first[i] + steps[i], wait_kind::credit,
                          list[i].peer);
  ok = B::flush(any) && ok;
  if constexpr (requires { B::finish(any); }) B::finish(any);
  if (g.sync_any(!ok)) { // the steps were not all passed: later calls of this worker refuse
    any.mark_failed();
    return false;
  }
  if (g.thread_rank() == 0)
    for (unsigned i = 0; i < n; ++i) {
      const p2p_op& o = list[i];
      if (o.kind != p2p_op::self) *l.pair_step(me, worker, o.peer, o.kind == p2p_op::recv) += steps[i];
    }
  g.sync();
  return true;
}

} // namespace algorithms
} // namespace ark
