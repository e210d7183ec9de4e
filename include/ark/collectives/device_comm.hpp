// ark/collectives/device_comm.hpp: the device-side API.
//
// A `device_comm` is the trivially copyable handle a communicator hands out (`device_handle()`).
// Pass it by value to your own kernel; every thread block of that kernel (a worker) can then run
// whole collectives with its peers, with no CPU on the path:
//
//   __global__ void __launch_bounds__(512, 1)
//   step(ark::device_comm<ark::platform::cuda> comm, float* grad, std::size_t n) {
//     ark::block_scope block;
//     comm.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<4>>(block, blockIdx.x, gridDim.x, grad, grad,
//     n);
//   }
//
// Rules: declare the bounds of your blocks (as above, up to 512 threads, the block size the
// library's own kernel is compiled for): without them the compiler may give a thread more
// registers than a 512-thread block can hold, and the launch fails. Every rank calls the same
// collectives in the same order with the same worker count and block size (algo::one_step
// decides from the block size whether a share fits its one step); each worker handles its own
// share of the data (join your blocks with a grid barrier before reading other blocks' results);
// workers must not exceed the communicator's `team.workers`. A call's threads read `in` as soon
// as they enter it, with their own mapping of elements to threads: sync the scope (block.sync())
// between your writes to `in` and the call. Outputs are visible to the whole scope when the call
// returns. A call returns false when it failed (a
// timeout, a mismatch, an abort; the communicator's error record says which): that worker's
// later calls then fail at once and store nothing; other workers learn of it only through their
// own waits, so let one failed block tell the others (a flag of yours) if they must stop. The
// kernel is one call of the communicator as far as the others are concerned: it must not run
// beside another of its calls (the communicator orders the calls it enqueues itself, on any
// stream, one after the other; order your kernel with them on its stream, as a call).
// The host communicator launches exactly this code, so both paths run one implementation.
#pragma once

#include "ark/algorithms/algorithms.hpp"
#include "ark/algorithms/p2p.hpp"
#include "ark/collectives/select.hpp"
#include "ark/dma/dma.hpp"
#include "ark/ops/builtin.hpp"

#include <type_traits>

namespace ark {

namespace detail {
/// f(a, backend) with the backend B, or the run-time choice's when B is automatic.
ARK_EXEC_CHECK_DISABLE
template <collective K, class B, class A, class F>
ARK_HD ARK_FORCEINLINE bool with_backend(choice c, A a, F& f) {
  if constexpr (!algorithms::implements<K, A>)
    return false; // never chosen for K
  else if constexpr (!std::is_same_v<B, dma::automatic>)
    return f(a, B{});
  else if constexpr (algo::is_one_step<A>) // LL only, whatever the size
    return f(a, dma::ll_packet<default_depth>{});
  else if (c.ll)
    return f(a, dma::ll_packet<default_depth>{});
  else
    return f(a, dma::thread_copy<default_depth>{});
}

/// The description of a call of collective K by algorithm A over backend B (what peers compare).
/// device_comm::run makes it; collective_work::prepare makes the same one before the wait for the
/// previous kernel, so that the compiler reuses it: one function keeps the two alike.
template <collective K, class A, class B, class T, class Op>
ARK_HD call_desc describe_call(unsigned workers, int root, std::size_t count) {
  return call_desc::make(K, A::id, static_cast<std::uint8_t>(dtype_of<T>), op_id<Op>, B::id, workers, root,
                         count);
}
} // namespace detail

/// Calls f(algorithm tag, backend) for the run-time choice `c`, keeping what the caller fixed
/// (A or B not automatic). Shared by device_comm (device-side calls) and communicator, which
/// resolves the choice on the host so that each launch runs one small kernel.
ARK_EXEC_CHECK_DISABLE
template <collective K, class A, class B, class F>
ARK_HD ARK_FORCEINLINE bool with_choice(choice c, F&& f) {
  if constexpr (!std::is_same_v<A, algo::automatic>) {
    return detail::with_backend<K, B>(c, A{}, f);
  } else {
    switch (c.algorithm) {
    case algo::one_shot::id:
      return detail::with_backend<K, B>(c, algo::one_shot{}, f);
    case algo::two_shot::id:
      return detail::with_backend<K, B>(c, algo::two_shot{}, f);
    case algo::ring::id:
      return detail::with_backend<K, B>(c, algo::ring{}, f);
    default:
      return detail::with_backend<K, B>(c, algo::direct{}, f);
    }
  }
}

/// B, or thread copies where B is automatic: the backend of a point-to-point group, and the one
/// zero-copy calls pace their phases over.
template <class B>
using or_thread_copies =
    std::conditional_t<std::is_same_v<B, dma::automatic>, dma::thread_copy<default_depth>, B>;

template <device P>
struct device_comm {
  team_view team;
  tuning tune;

  ARK_HD int rank() const { return team.rank; }
  ARK_HD int world() const { return team.world; }

  /// A context for a custom collective built from ark's primitives (see examples/03).
  template <dma_backend B, scope G>
  ARK_HD context<P, B, G> make_context(G& g, unsigned worker, unsigned workers, call_desc d) const {
    return context<P, B, G>(g, team, worker, workers, d);
  }

  /// Runs collective K with algorithm A over backend B; either may be `automatic`.
  /// Scope-collective. Returns false after a failure, which the control block records.
  template <collective K, class A = algo::automatic, class B = dma::automatic, scope G, element T, class Op>
  ARK_HD ARK_FORCEINLINE bool run(G& g, unsigned worker, unsigned workers, const T* in, T* out,
                                  std::size_t count, int root, const Op& op) const {
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    if constexpr (std::is_same_v<A, algo::automatic> || std::is_same_v<B, dma::automatic>) {
      const choice c = select(K, count * sizeof(T), team.world, tune);
      return ark::with_choice<K, A, B>(c, [&](auto a, auto b) {
        return run<K, decltype(a), decltype(b)>(g, worker, workers, in, out, count, root, op);
      });
    } else {
      static_assert(dma_backend<B>, "ark: B is not a DMA backend (see ark/concepts/dma_backend.hpp)");
      bool served = true;
      if constexpr (dma::queue_backend<B>) served = B::served(team);
      if (worker >= workers || workers > team.lay.workers || B::depth > team.lay.max_depth() ||
          (!B::direct && !team.lay.has_staging()) || !served) {
        if (g.thread_rank() == 0)
          record_error<P>(team, errc::unsupported, static_cast<std::uint32_t>(unsupported_kind::setup), -1,
                          worker, 0, workers, team.lay.workers);
        return false;
      }
      if constexpr (has_root(K))
        if (root < 0 || root >= team.world) {
          if (g.thread_rank() == 0) // refused alike on every rank that names it, before any wait
            record_error<P>(team, errc::unsupported, static_cast<std::uint32_t>(unsupported_kind::root), -1,
                            worker, 0, static_cast<std::uint64_t>(static_cast<std::int64_t>(root)),
                            static_cast<std::uint64_t>(team.world));
          return false;
        }
      const call_desc d = detail::describe_call<K, A, B, T, Op>(workers, root, count);
      const context<P, B, G> ctx(g, team, worker, workers, d);
      // the verdict below is the barrier that makes the outputs visible (algorithms::ending);
      // a backend's finish runs before it and must not read them
      const bool ok = algorithms::run<K, A, algorithms::ending::verdict>(ctx, in, out, count, root, op);
      if constexpr (requires { B::finish(ctx); }) B::finish(ctx);
      // The verdict of every thread (a thread's last loads may fail alone). A failed call marks
      // its worker, and the worker's later calls refuse before their first store into a peer's
      // slot or read from their own (dma::wait_credit, every backend's open_recv, and the LL
      // latency path, which waits for no credit): the failed call did not pass its step, so they
      // would use that step while a late peer may still read or write it. Not here at the start:
      // a branch on the round word there makes the call's input loads wait for the round's load,
      // one more memory round trip per freshly launched call (docs/perf.md).
      if (!g.sync_any(!ok)) return true;
      ctx.mark_failed();
      return false;
    }
  }

  /// Collective K (all_reduce, reduce_scatter, all_gather) zero-copy (algorithms/zero_copy.hpp):
  /// `in` symmetric; `out` symmetric for all_reduce (each rank stores the chunk it reduced into
  /// every rank's output), else this rank's alone. B: thread copies (an automatic B is
  /// thread_copy<default_depth>), whose depth is the handshakes' credits, or an engine backend
  /// (dma::proxy_engine, dma::tma), whose copies then move what needs no reduction; not a
  /// device-graph engine, which copies staging slots alone. Scope-collective; false after a
  /// failure, which the control block records.
  template <collective K, class B = dma::automatic, scope G, element T, class Out, class Op>
  ARK_HD bool run_zero_copy(G& g, unsigned worker, unsigned workers, symmetric<const T> in, Out out,
                            std::size_t count, const Op& op) const {
    static_assert(K == collective::all_reduce || K == collective::reduce_scatter ||
                      K == collective::all_gather,
                  "ark: zero-copy serves all_reduce, reduce_scatter and all_gather");
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    using B1 = or_thread_copies<B>;
    static_assert(dma_backend<B1> && !B1::ll,
                  "ark: zero-copy runs over thread copies or an engine backend, not LL packets");
    // a queue backend's engine runs only with staging, and device graphs copy slots alone; a
    // zero-copy call stages nothing, so TMA needs no staging
    bool served = true;
    if constexpr (dma::queue_backend<B1>) served = team.lay.has_staging() && !dma::graphs_serve(team);
    if (worker >= workers || workers > team.lay.workers || B1::depth > team.lay.max_depth() || !served) {
      if (g.thread_rank() == 0)
        record_error<P>(team, errc::unsupported, static_cast<std::uint32_t>(unsupported_kind::setup), -1,
                        worker, 0, workers, team.lay.workers);
      return false;
    }
    const call_desc d = detail::describe_call<K, algo::zero_copy, B1, T, Op>(workers, 0, count);
    const context<P, B1, G> ctx(g, team, worker, workers, d);
    const bool ok = algorithms::run_zero_copy<K>(ctx, in, out, count, op);
    if constexpr (requires { B1::finish(ctx); }) B1::finish(ctx);
    if (!g.sync_any(!ok)) return true; // a failed call marks its worker (see run)
    ctx.mark_failed();
    return false;
  }
  /// All-reduce with both buffers symmetric (communicator::symmetric): zero-copy.
  template <class B = dma::automatic, scope G, element T, class Op = op::sum>
  ARK_HD bool all_reduce(G& g, unsigned worker, unsigned workers, symmetric<const T> in, symmetric<T> out,
                         std::size_t count, Op op = {}) const {
    return run_zero_copy<collective::all_reduce, B>(g, worker, workers, in, out, count, op);
  }
  /// Reduce-scatter from a symmetric input: zero-copy.
  template <class B = dma::automatic, scope G, element T, class Op = op::sum>
  ARK_HD bool reduce_scatter(G& g, unsigned worker, unsigned workers, symmetric<const T> in, T* out,
                             std::size_t count, Op op = {}) const {
    return run_zero_copy<collective::reduce_scatter, B>(g, worker, workers, in, out, count, op);
  }
  /// All-gather from a symmetric input: zero-copy. In place, `in` is the symmetric view of `out`
  /// itself (rank r's input is its block r).
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool all_gather(G& g, unsigned worker, unsigned workers, symmetric<const T> in, T* out,
                         std::size_t count) const {
    return run_zero_copy<collective::all_gather, B>(g, worker, workers, in, out, count, op::sum{});
  }

  template <class A = algo::automatic, class B = dma::automatic, scope G, element T, class Op = op::sum>
  ARK_HD bool all_reduce(G& g, unsigned worker, unsigned workers, const T* in, T* out, std::size_t count,
                         Op op = {}) const {
    return run<collective::all_reduce, A, B>(g, worker, workers, in, out, count, 0, op);
  }
  template <class A = algo::automatic, class B = dma::automatic, scope G, element T, class Op = op::sum>
  ARK_HD bool reduce_scatter(G& g, unsigned worker, unsigned workers, const T* in, T* out, std::size_t count,
                             Op op = {}) const {
    return run<collective::reduce_scatter, A, B>(g, worker, workers, in, out, count, 0, op);
  }
  template <class A = algo::automatic, class B = dma::automatic, scope G, element T>
  ARK_HD bool all_gather(G& g, unsigned worker, unsigned workers, const T* in, T* out,
                         std::size_t count) const {
    return run<collective::all_gather, A, B>(g, worker, workers, in, out, count, 0, op::sum{});
  }
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool broadcast(G& g, unsigned worker, unsigned workers, const T* in, T* out, std::size_t count,
                        int root) const {
    return run<collective::broadcast, algo::direct, B>(g, worker, workers, in, out, count, root, op::sum{});
  }
  template <class B = dma::automatic, scope G, element T, class Op = op::sum>
  ARK_HD bool reduce(G& g, unsigned worker, unsigned workers, const T* in, T* out, std::size_t count,
                     int root, Op op = {}) const {
    return run<collective::reduce, algo::direct, B>(g, worker, workers, in, out, count, root, op);
  }
  /// Block p (of `count`) of `in` to rank p, block q of `out` from rank q; in and out disjoint.
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool all_to_all(G& g, unsigned worker, unsigned workers, const T* in, T* out,
                         std::size_t count) const {
    return run<collective::all_to_all, algo::direct, B>(g, worker, workers, in, out, count, 0, op::sum{});
  }
  // -- point-to-point ---------------------------------------------------------------------------
  /// Runs a group of sends and receives (algorithms/p2p.hpp) on point-to-point worker `worker`
  /// of `workers` (at most team_config.p2p_workers; the peer's group must use as many). Only the
  /// ranks a group names take part; they must list their sends to and receives from each other
  /// in the same order. Any mix completes whatever order each rank lists it in. Scope-collective;
  /// false after a failure, which the control block records. An automatic B is thread copies.
  template <class B = dma::automatic, scope G>
  ARK_HD bool p2p(G& g, unsigned worker, unsigned workers, const p2p_ops& ops) const {
    return p2p<B>(g, worker, workers, ops.op, ops.n);
  }
  /// The same over `n` operations at `op` (memory every thread of the scope reads: yours, or the
  /// kernel's parameters; not a p2p_ops in each thread's registers, which would live in local
  /// memory: see layout::p2p_plan).
  template <class B = dma::automatic, scope G>
  ARK_HD bool p2p(G& g, unsigned worker, unsigned workers, const p2p_op* op, unsigned n) const {
    using B1 = or_thread_copies<B>;
    static_assert(dma_backend<B1>, "ark: B is not a DMA backend (see ark/concepts/dma_backend.hpp)");
    bool served = true;
    if constexpr (dma::queue_backend<B1>) served = B1::served(team);
    auto refuse = [&](unsupported_kind k, std::uint64_t mine, std::uint64_t theirs) {
      if (g.thread_rank() == 0)
        record_error<P>(team, errc::unsupported, static_cast<std::uint32_t>(k), -1, worker, 0, mine, theirs);
      return false;
    };
    if (worker >= workers || workers > team.lay.p2p || B1::depth > team.lay.max_depth() ||
        (!B1::direct && !team.lay.has_staging()) || !served)
      return refuse(unsupported_kind::setup, workers, team.lay.p2p);
    if (n > p2p_max_ops) return refuse(unsupported_kind::p2p, n, p2p_max_ops);
    for (unsigned i = 0; i < n; ++i)
      if (op[i].peer < 0 || op[i].peer >= team.world ||
          (op[i].peer == team.rank) != (op[i].kind == p2p_op::self))
        return refuse(unsupported_kind::p2p, static_cast<std::uint64_t>(op[i].peer), team.world);
    return algorithms::run_p2p<B1, P>(g, team, worker, workers, op, n);
  }
  /// One send of `count` elements at `buf` to `peer` (a group of one).
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool send(G& g, unsigned worker, unsigned workers, const T* buf, std::size_t count, int peer) const {
    const p2p_op op = make_p2p_op<T>(p2p_op::send, buf, count, peer);
    return p2p<B>(g, worker, workers, &op, 1);
  }
  /// One receive of `count` elements from `peer` into `buf` (a group of one).
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool recv(G& g, unsigned worker, unsigned workers, T* buf, std::size_t count, int peer) const {
    const p2p_op op = make_p2p_op<T>(p2p_op::recv, buf, count, peer);
    return p2p<B>(g, worker, workers, &op, 1);
  }

  /// Every rank's `in` (count elements) lands as block (rank) of `root`'s `out`; other ranks'
  /// `out` is not used.
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool gather(G& g, unsigned worker, unsigned workers, const T* in, T* out, std::size_t count,
                     int root) const {
    return run<collective::gather, algo::direct, B>(g, worker, workers, in, out, count, root, op::sum{});
  }
  /// Block p (of `count`) of `root`'s `in` lands in rank p's `out`; other ranks' `in` is not used.
  template <class B = dma::automatic, scope G, element T>
  ARK_HD bool scatter(G& g, unsigned worker, unsigned workers, const T* in, T* out, std::size_t count,
                      int root) const {
    return run<collective::scatter, algo::direct, B>(g, worker, workers, in, out, count, root, op::sum{});
  }
};

} // namespace ark
