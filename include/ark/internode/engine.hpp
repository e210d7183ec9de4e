// ark/internode/engine.hpp: what carries a hierarchical collective between nodes. ark writes no
// network transport: across nodes it hands each rail's traffic (local rank l of every node) to an
// engine people already run on their clusters, and keeps its own transports inside the node.
//
// An internode_engine E, for an lvalue e, serves one rail: e.rank() is this node's place on it,
// e.size() the number of nodes. Its collectives take host memory, block until done, and are
// collective over the rail; every wait is bounded (ark::timeout_error after the engine's bound,
// never a hang), and after a timeout the engine refuses every later call:
//   e.all_reduce(in, out, count, t, r)        out = in reduced over the rail; in place: in == out
//   e.reduce_scatter(in, out, count, t, r)    in: size() blocks of count; out = block rank()
//                                             reduced; in place: out == in + rank() * count
//   e.all_gather(in, out, bytes)              out: size() blocks of bytes; in place: in == out +
//                                             rank() * bytes
//   e.broadcast(in, out, bytes, root)         out = root's in (root: in == out allowed)
//   e.reduce(in, out, count, t, r, root)      root's out = in reduced (root: in == out allowed)
//   e.all_to_all(in, out, bytes)              in, out: size() blocks of bytes; block n of in
//                                             lands as block rank() of node n's out; not in place
// t: the element type; r: the reduction (sum, prod, min, max; an average is a sum divided once,
// at the end, by r.divide_by: the whole job's world, which the engine does not know).
// Models: bootstrap_engine (any bootstrap: the reference, host memory), mpi_engine (MPI; include
// ark/internode/mpi_engine.hpp yourself). A user's engine is a third model of the same concept.
//
// An engine may take the platform's memory too (a GPU-aware MPI): e.device_memory() true says
// that its collectives, still blocking, read and write GPU memory. Its callers then divide
// averages themselves (r.divide_by is 1), and give it memory they keep after a timeout, since
// the call that timed out may still write it (engine_takes_device_memory).
//
// A stream_engine<E, P> has the same collectives on the platform's memory (a GPU's), each with
// one more argument, a stream of P, on which it enqueues the call and returns at once: ark's
// calls before and after it on that stream order it, with no host wait and no staging. Its bound
// on a call that never ends is its own to keep (it aborts the call, so the stream moves on).
// Model: nccl_engine (NCCL or RCCL; include ark/internode/nccl_engine.hpp yourself).
#pragma once

#include "ark/core/dtype.hpp"
#include "ark/core/error.hpp"
#include "ark/ops/dynamic.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace ark {

/// A reduction as an engine carries it out.
struct engine_reduction {
  op::dynamic::kind k = op::dynamic::kind::sum; ///< sum, prod, min or max
  std::uint32_t divide_by = 1;                  ///< the result is divided by it (an average)
};

template <class E>
concept internode_engine = requires(E& e, const void* in, void* out, std::size_t n, dtype t,
                                    engine_reduction r, int root) {
  { e.rank() } -> std::same_as<int>;
  { e.size() } -> std::same_as<int>;
  { e.all_reduce(in, out, n, t, r) } -> std::same_as<void>;
  { e.reduce_scatter(in, out, n, t, r) } -> std::same_as<void>;
  { e.all_gather(in, out, n) } -> std::same_as<void>;
  { e.broadcast(in, out, n, root) } -> std::same_as<void>;
  { e.reduce(in, out, n, t, r, root) } -> std::same_as<void>;
  { e.all_to_all(in, out, n) } -> std::same_as<void>;
};

/// An engine that enqueues on streams of platform P (see the top of this file).
template <class E, class P>
concept stream_engine = requires(E& e, const void* in, void* out, std::size_t n, dtype t, engine_reduction r,
                                 int root, typename P::stream s) {
  { e.rank() } -> std::same_as<int>;
  { e.size() } -> std::same_as<int>;
  { e.all_reduce(in, out, n, t, r, s) } -> std::same_as<void>;
  { e.reduce_scatter(in, out, n, t, r, s) } -> std::same_as<void>;
  { e.all_gather(in, out, n, s) } -> std::same_as<void>;
  { e.broadcast(in, out, n, root, s) } -> std::same_as<void>;
  { e.reduce(in, out, n, t, r, root, s) } -> std::same_as<void>;
  { e.all_to_all(in, out, n, s) } -> std::same_as<void>;
};

/// Whether e's collectives take the platform's memory (e.device_memory(), for an engine that has
/// it; host memory only otherwise).
template <class E>
bool engine_takes_device_memory(E& e) {
  if constexpr (requires {
                  { e.device_memory() } -> std::convertible_to<bool>;
                })
    return static_cast<bool>(e.device_memory());
  else
    return false;
}

namespace detail {

/// out[i] = the reduction of srcs[0][i], ..., srcs[k-1][i], in that order, carried out in T's
/// accumulation type (float for the 16-bit floats), divided by r.divide_by at the end. out may
/// be one of the sources.
template <element T>
void reduce_on_host(const T* const* srcs, int k, T* out, std::size_t n, engine_reduction r) {
  using A = acc_t<T>;
  const op::dynamic f{r.k};
  for (std::size_t i = 0; i < n; ++i) {
    A a = to_acc(srcs[0][i]);
    for (int j = 1; j < k; ++j) a = f(a, to_acc(srcs[j][i]));
    if (r.divide_by > 1) a = a / static_cast<A>(r.divide_by);
    out[i] = from_acc<T>(a);
  }
}

/// Refuses a reduction no engine carries out (premul_sum; avg is a sum with divide_by).
inline void check_engine_reduction(engine_reduction r, const char* call) {
  using K = op::dynamic::kind;
  if (r.k != K::sum && r.k != K::prod && r.k != K::min && r.k != K::max)
    throw_invalid(call, "an inter-node engine reduces with sum, prod, min or max only");
  if (r.divide_by == 0) throw_invalid(call, "divide_by must be at least 1");
}

} // namespace detail
} // namespace ark
