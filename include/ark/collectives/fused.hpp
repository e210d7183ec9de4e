// ark/collectives/fused.hpp: a group of calls of any kinds as one launch
// (communicator::group(calls...)). Each call is a value made by ark::calls (all_reduce, ...,
// send, recv); their types are known where the group is written, so the launch is one kernel
// made for exactly that list, and nothing is compiled for groups a program does not write.
//
//   comm.group(ark::calls::all_reduce(grad, grad, n),
//              ark::calls::all_gather(shard, params, m),
//              ark::calls::send(act, k, next), ark::calls::recv(prev_act, k, prev));
//
// The launch's first blocks run the collectives, each call by the workers its own plan gives
// (blocks past them skip it), in the order listed; the blocks after them are the
// point-to-point workers, which run the sends and receives meanwhile. Like an NCCL group, the
// calls run at once: none may read what another writes (the communicator refuses such
// buffers).
#pragma once

#include "ark/collectives/device_comm.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ark {
namespace calls {

/// A collective of a fused group: K by algorithm A over backend B (either automatic: chosen in
/// the kernel from the same tuning the host plans with, so both pick alike) on `count`
/// elements of T a block. `workers`: its plan's, which the communicator sets.
template <collective K, class A, class B, class T, class Op>
struct collective_call {
  static_assert(!std::is_same_v<B, dma::copy_engine> && !dma::queue_backend<B>,
                "ark: a fused group runs on its kernel's blocks: name a channel backend "
                "(thread copies, LL packets) or dma::automatic");
  static_assert(!std::is_same_v<A, algo::zero_copy>,
                "ark: a fused group runs its collectives staged; call zero-copy ones on their own");
  static constexpr collective kind = K;
  using algorithm = A;
  using backend = B;
  using element_type = T;
  const T* in;
  T* out;
  std::size_t count;
  int root;
  Op op;
  unsigned workers = 0;
};

/// A send or a receive (`kind`, p2p_op's) of `count` elements of T at `buf` with `peer`, in a
/// fused group over backend B (automatic: by its size, as communicator::send picks).
template <class B, class T>
struct p2p_call {
  static_assert(!std::is_same_v<B, dma::copy_engine>, "ark: send and recv run over a channel backend");
  using backend = B;
  using element_type = T;
  std::uint8_t kind;
  const T* buf;
  std::size_t count;
  int peer;
};

template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
collective_call<collective::all_reduce, A, B, T, Op> all_reduce(const T* in, T* out, std::size_t count,
                                                                Op o = {}) {
  return {in, out, count, 0, o};
}
template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
collective_call<collective::reduce_scatter, A, B, T, Op> reduce_scatter(const T* in, T* out,
                                                                        std::size_t count, Op o = {}) {
  return {in, out, count, 0, o};
}
template <class A = algo::automatic, class B = dma::automatic, element T>
collective_call<collective::all_gather, A, B, T, op::sum> all_gather(const T* in, T* out, std::size_t count) {
  return {in, out, count, 0, {}};
}
template <class B = dma::automatic, element T>
collective_call<collective::broadcast, algo::direct, B, T, op::sum> broadcast(const T* in, T* out,
                                                                              std::size_t count, int root) {
  return {in, out, count, root, {}};
}
template <class B = dma::automatic, element T, class Op = op::sum>
collective_call<collective::reduce, algo::direct, B, T, Op> reduce(const T* in, T* out, std::size_t count,
                                                                   int root, Op o = {}) {
  return {in, out, count, root, o};
}
template <class B = dma::automatic, element T>
collective_call<collective::all_to_all, algo::direct, B, T, op::sum> all_to_all(const T* in, T* out,
                                                                                std::size_t count) {
  return {in, out, count, 0, {}};
}
template <class B = dma::automatic, element T>
collective_call<collective::gather, algo::direct, B, T, op::sum> gather(const T* in, T* out,
                                                                        std::size_t count, int root) {
  return {in, out, count, root, {}};
}
template <class B = dma::automatic, element T>
collective_call<collective::scatter, algo::direct, B, T, op::sum> scatter(const T* in, T* out,
                                                                          std::size_t count, int root) {
  return {in, out, count, root, {}};
}
/// `count` elements at `buf` to rank `peer`, which receives them with a recv in its group.
template <class B = dma::automatic, element T>
p2p_call<B, T> send(const T* buf, std::size_t count, int peer) {
  return {p2p_op::send, buf, count, peer};
}
/// `count` elements from rank `peer` into `buf`.
template <class B = dma::automatic, element T>
p2p_call<B, T> recv(T* buf, std::size_t count, int peer) {
  return {p2p_op::recv, buf, count, peer};
}

} // namespace calls

namespace detail {

template <class C>
inline constexpr bool is_collective_call = false;
template <collective K, class A, class B, class T, class Op>
inline constexpr bool is_collective_call<calls::collective_call<K, A, B, T, Op>> = true;
template <class C>
inline constexpr bool is_p2p_call = false;
template <class B, class T>
inline constexpr bool is_p2p_call<calls::p2p_call<B, T>> = true;
template <class C>
concept fused_call = is_collective_call<C> || is_p2p_call<C>;

/// What a call leaves in the kernel's parameters: a collective itself; a send or receive
/// nothing (the point-to-point workers read them from fused_work::ops).
struct no_call {};
template <class C>
using device_part = std::conditional_t<is_collective_call<C>, C, no_call>;

template <class C>
device_part<C> device_part_of(const C& c) {
  if constexpr (is_collective_call<C>)
    return c;
  else
    return {};
}

/// The backend of a fused group's sends and receives: the one they all name (automatic where
/// there are none).
template <class... C>
struct p2p_backend_of {
  using type = dma::automatic;
};
template <class C, class... R>
struct p2p_backend_of<C, R...> : p2p_backend_of<R...> {};
template <class B, class T, class... R>
struct p2p_backend_of<calls::p2p_call<B, T>, R...> {
  static_assert(((!is_p2p_call<R> || std::is_same_v<typename R::backend, B>)&&...),
                "ark: a group's sends and receives run over one backend: these name several");
  using type = B;
};

/// The collectives of a fused launch, by value (the kernel's parameters), in the order listed.
template <class... C>
struct call_list {
  template <class F>
  ARK_HD ARK_FORCEINLINE bool each(F&) const {
    return true;
  }
};
template <class C, class... R>
struct call_list<C, R...> {
  C head;
  call_list<R...> tail;
  template <class F>
  ARK_HD ARK_FORCEINLINE bool each(F& f) const {
    return f(head) && tail.each(f);
  }
};
inline call_list<> make_call_list() { return {}; }
template <class C, class... R>
call_list<C, R...> make_call_list(const C& c, const R&... r) {
  return {c, make_call_list(r...)};
}

/// One launch of a fused group: blocks [0, collective_workers) run the collectives in order
/// (a worker stops at its first failure, as in batch_work), the next p2p_workers blocks run the
/// `n` sends and receives over Bp (automatic: ops [0, small) over LL packets first, then the
/// rest over thread copies, as a group's two launches would).
template <device P, class Bp, unsigned Np, class... C>
struct fused_work {
  device_comm<P> comm;
  call_list<C...> calls;
  unsigned collective_workers = 0, p2p_workers = 0, small = 0, n = 0;
  p2p_op ops[Np ? Np : 1];
  /// Runs one collective of the list on this worker, or skips it; false after a failure. (A
  /// functor, not a lambda, so that it can be forced inline: every call of the list inlines
  /// into the kernel, which keeps each under the kernel's register bound where the code is
  /// relocatable and a call not inlined would be compiled for the default bound.)
  template <class G>
  struct run_one {
    const device_comm<P>& comm;
    G& g;
    unsigned worker;
    ARK_HD ARK_FORCEINLINE bool operator()(const no_call&) const { return true; }
    template <class K>
    ARK_HD ARK_FORCEINLINE bool operator()(const K& c) const {
      return worker >= c.workers || comm.template run<K::kind, typename K::algorithm, typename K::backend>(
                                        g, worker, c.workers, c.in, c.out, c.count, c.root, c.op);
    }
  };
  template <class G>
  ARK_HD ARK_FORCEINLINE void operator()(G& g, unsigned worker, unsigned) const {
    if (worker >= collective_workers) {
      if constexpr (Np > 0) {
        const unsigned w = worker - collective_workers;
        if constexpr (std::is_same_v<Bp, dma::automatic>) {
          if (small && !comm.template p2p<dma::ll_packet<default_depth>>(g, w, p2p_workers, ops, small))
            return;
          if (n > small)
            comm.template p2p<dma::thread_copy<default_depth>>(g, w, p2p_workers, ops + small, n - small);
        } else {
          comm.template p2p<Bp>(g, w, p2p_workers, ops, n);
        }
      }
      return;
    }
    run_one<G> one{comm, g, worker};
    calls.each(one);
  }
};

} // namespace detail
} // namespace ark
