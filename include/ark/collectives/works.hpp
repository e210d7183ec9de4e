// ark/collectives/works.hpp: what a communicator launches. Each work is run by every worker of
// a launch (P::launch calls it once per thread, with the thread's scope): a collective through
// device_comm, a batch of them (a group's), a user's custom collective, and the barrier of a
// communicator's end.
#pragma once

#include "ark/collectives/device_comm.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ark::detail {

/// One collective call, run by every worker through device_comm.
template <device P, collective K, class A, class B, class T, class Op>
struct collective_work {
  device_comm<P> comm;
  const T* in;
  T* out;
  std::size_t count;
  int root;
  Op op;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    comm.template run<K, A, B>(g, worker, workers, in, out, count, root, op);
  }

  /// The arguments of a call, in registers the compiler cannot trace back to the kernel's
  /// parameters (P::opaque), so that what prepare() computes from them is reused after the
  /// wait for the previous kernel instead of computed again. Only GPU launches call prepare.
  struct prepared {
    std::size_t count;
    unsigned worker, workers;
    int root;
  };
  /// Before the wait: the call's tag and, for one-shot all-reduce, the worker's share (its
  /// divisions). run() computes both again, from the same registers: the compiler reuses these.
  ARK_HD prepared prepare(unsigned worker, unsigned workers) const {
    const prepared p{P::opaque(std::uint64_t{count}), P::opaque(std::uint32_t{worker}),
                     P::opaque(std::uint32_t{workers}),
                     static_cast<int>(P::opaque(static_cast<std::uint32_t>(root)))};
    P::compute_here(describe_call<K, A, B, T, Op>(p.workers, p.root, p.count).tag());
    if constexpr (K == collective::all_reduce &&
                  (std::is_same_v<A, algo::one_shot> || algo::is_one_step<A>)) {
      const elem_range share = split({0, p.count}, p.workers, p.worker, align_elems<T>);
      P::compute_here(share.begin);
      P::compute_here(share.len);
    }
    return p;
  }
  template <class G>
  ARK_HD void operator()(G& g, const prepared& p) const {
    comm.template run<K, A, B>(g, p.worker, p.workers, in, out, p.count, p.root, op);
  }
};

/// One collective of a batch: its buffers, count, root and op, and the workers its own plan
/// gives it (a launch's blocks past them skip it).
template <class T, class Op>
struct batch_entry {
  const T* in;
  T* out;
  std::size_t count;
  int root;
  unsigned workers;
  Op op;
};

/// The most collectives one batch holds: they travel in the kernel's parameters, which every
/// thread reads in place (like p2p_ops).
inline constexpr unsigned batch_max_calls = 32;

template <class T, class Op>
struct collective_batch {
  batch_entry<T, Op> call[batch_max_calls];
  unsigned n = 0;
};

/// Collectives of one kind, element type, op type, algorithm and backend, run in order by the
/// workers of one launch (a communicator's group): each through device_comm as a call of its
/// own, by the workers of its plan. A worker stops at its first failure: its later calls would
/// refuse anyway (a failed call marks its worker), and its peers' time out.
template <device P, collective K, class A, class B, class T, class Op>
struct batch_work {
  device_comm<P> comm;
  collective_batch<T, Op> batch;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned) const {
    for (unsigned i = 0; i < batch.n; ++i) {
      const batch_entry<T, Op>& c = batch.call[i];
      if (worker < c.workers &&
          !comm.template run<K, A, B>(g, worker, c.workers, c.in, c.out, c.count, c.root, c.op))
        return;
    }
  }
};

/// One zero-copy call (algorithms/zero_copy.hpp): `Out` is symmetric<T> for all_reduce, else T*.
template <device P, collective K, class B, class T, class Out, class Op>
struct zero_copy_work {
  device_comm<P> comm;
  symmetric<const T> in;
  Out out;
  std::size_t count;
  Op op;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    comm.template run_zero_copy<K, B>(g, worker, workers, in, out, count, op);
  }
};

/// A user's custom collective: f(ctx) on every worker.
template <device P, class B, class F>
struct custom_work {
  device_comm<P> comm;
  F f;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    const auto ctx = comm.template make_context<B>(
        g, worker, workers, call_desc::make(collective::custom, 0, 0, 0, B::id, workers, 0, 0));
    f(ctx);
    if constexpr (requires { B::finish(ctx); }) B::finish(ctx);
  }
};

/// A group of sends and receives, run by the point-to-point workers through device_comm.
template <device P, class B>
struct p2p_work {
  device_comm<P> comm;
  p2p_ops ops;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    comm.template p2p<B>(g, worker, workers, ops);
  }
};

/// A barrier of worker 0 of every rank (a communicator's end).
template <device P>
struct barrier_work {
  device_comm<P> comm;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    comm.template make_context<dma::thread_copy<1>>(g, worker, workers, call_desc{}).barrier();
  }
};

} // namespace ark::detail
