// ark/algorithms/algorithms.hpp: the algorithm tags users name, and the one place that maps a
// (collective, algorithm) pair to its body. An unsupported pair fails at compile time.
#pragma once

#include "ark/algorithms/direct.hpp"
#include "ark/algorithms/one_shot.hpp"
#include "ark/algorithms/ring.hpp"
#include "ark/algorithms/two_shot.hpp"
#include "ark/algorithms/zero_copy.hpp"
#include "ark/team/call_desc.hpp"

#include <cstdint>
#include <type_traits>

namespace ark {

namespace algo {
/// Chosen at run time from the size and the world (see ark/collectives/select.hpp).
struct automatic {
  static constexpr std::uint8_t id = 0;
  static constexpr const char* name = "auto";
};
/// All-reduce: every rank pushes everything to everyone and reduces locally.
struct one_shot {
  static constexpr std::uint8_t id = 1;
  static constexpr const char* name = "one_shot";
};
/// All-reduce: one_shot for calls whose every worker's share fits one LL step, and nothing else:
/// the latency path alone, without one_shot's pipelined path, which slows a call inside a
/// persistent kernel just by being compiled into it, though never taken (docs/perf.md). Runs
/// over LL packets (dma::automatic picks them). A larger share fails: from the host with
/// invalid_argument before anything launches (call_plan::one_step says whether a call fits); on
/// the device with errc::unsupported, alike on every rank that calls it. It is one_shot on the
/// wire (same id, same protocol): ranks may mix the two when they run the same backend and
/// workers (with dma::automatic, one_step takes LL packets whatever the size, one_shot only up to
/// tuning::ll_max_bytes).
struct one_step {
  static constexpr std::uint8_t id = one_shot::id;
  static constexpr const char* name = "one_step";
};
/// algo::one_step on a team of exactly `World` ranks, known when the kernel is compiled: its loops
/// over peers unroll and the kernel holds no path for other team sizes. one_step holds two (two
/// ranks, and any number), and the second slows the first inside a persistent kernel, so a call
/// there is faster on one_step_world (docs/perf.md). Name it in your own kernel when you compile
/// that kernel for a known team size. (Launched from the host, one call a kernel, it is slower
/// than one_step's kernel, for reasons not found, so a communicator's own calls keep one_step's.)
/// On a team of another size a call fails: from the host with invalid_argument before anything
/// launches, on the device with errc::unsupported, alike on every rank that calls it (a peer that
/// called one_shot or one_step instead waits for it: a timeout). Same id and protocol as one_step
/// and one_shot.
template <int World>
struct one_step_world {
  static_assert(World >= 1, "ark: algo::one_step_world<World>: a team has at least one rank");
  static constexpr std::uint8_t id = one_shot::id;
  static constexpr const char* name = "one_step";
  static constexpr int world = World;
};
/// Whether A is algo::one_step or one of the one_step_world<N>.
template <class A>
inline constexpr bool is_one_step = std::is_same_v<A, one_step>;
template <int World>
inline constexpr bool is_one_step<one_step_world<World>> = true;
/// The team size an algorithm tag fixes at compile time (one_step_world<N>: N), else 0.
template <class A>
inline constexpr int fixed_world = 0;
template <int World>
inline constexpr int fixed_world<one_step_world<World>> = World;
/// All-reduce: direct reduce-scatter, then direct all-gather.
struct two_shot {
  static constexpr std::uint8_t id = 2;
  static constexpr const char* name = "two_shot";
};
/// All-reduce, reduce-scatter, all-gather: pipelined ring.
struct ring {
  static constexpr std::uint8_t id = 3;
  static constexpr const char* name = "ring";
};
/// Reduce-scatter, all-gather, broadcast, reduce, all-to-all: every rank talks to its peers
/// directly.
struct direct {
  static constexpr std::uint8_t id = 4;
  static constexpr const char* name = "direct";
};
/// All-reduce, reduce-scatter, all-gather over buffers every rank registered at the same place
/// (team/symmetric.hpp): the peers' buffers are read in place and nothing is staged in the
/// scratch slots (algorithms/zero_copy.hpp). Over thread copies, or an engine backend whose
/// copies move what needs no reduction (not over device graphs). A communicator's automatic
/// choice takes it for registered buffers (tuning::zero_copy_min_bytes); naming it for buffers
/// that are not registered is refused before anything launches.
struct zero_copy {
  static constexpr std::uint8_t id = 5;
  static constexpr const char* name = "zero_copy";
};
} // namespace algo

inline const char* algorithm_name(std::uint8_t id) {
  constexpr const char* names[] = {"auto", "one_shot", "two_shot", "ring", "direct", "zero_copy"};
  return id < 6 ? names[id] : "unknown";
}

namespace detail {
template <class>
inline constexpr bool dependent_false = false;
} // namespace detail

namespace algorithms {

/// Whether algorithm A implements collective K.
template <collective K, class A>
inline constexpr bool implements = (K == collective::all_reduce &&
                                    (std::is_same_v<A, algo::one_shot> || algo::is_one_step<A> ||
                                     std::is_same_v<A, algo::two_shot> || std::is_same_v<A, algo::ring>)) ||
                                   ((K == collective::reduce_scatter || K == collective::all_gather) &&
                                    (std::is_same_v<A, algo::direct> || std::is_same_v<A, algo::ring>)) ||
                                   ((K == collective::broadcast || K == collective::reduce ||
                                     K == collective::all_to_all || K == collective::gather ||
                                     K == collective::scatter) &&
                                    std::is_same_v<A, algo::direct>);

/// Runs collective K with algorithm A. `root` is used by broadcast, reduce, gather and scatter only. With
/// ending::verdict the caller's next step must be a barrier of the scope (see ending).
/// This and each algorithm's entry are forced inline: a kernel that runs several collectives (a
/// fused group, a user's kernel) reaches them from several places, where the compiler may keep
/// them as calls, and with relocatable device code a function called is compiled for the
/// default register bound, above what the kernel's 512-thread blocks leave: the kernel would not
/// build. Inlined, each is compiled within the kernel's bound, as a kernel of one call has it.
template <collective K, class A, ending E = ending::barrier, class Ctx, class T, class Op>
ARK_HD ARK_FORCEINLINE bool run(const Ctx& ctx, const T* in, T* out, std::size_t count, int root,
                                const Op& op) {
  if constexpr (K == collective::all_reduce && std::is_same_v<A, algo::one_shot>)
    return all_reduce_one_shot<E>(ctx, in, out, count, op);
  else if constexpr (K == collective::all_reduce && algo::is_one_step<A>)
    return all_reduce_one_step<E, algo::fixed_world<A>>(ctx, in, out, count, op);
  else if constexpr (K == collective::all_reduce && std::is_same_v<A, algo::two_shot>)
    return all_reduce_two_shot(ctx, in, out, count, op);
  else if constexpr (K == collective::all_reduce && std::is_same_v<A, algo::ring>)
    return all_reduce_ring(ctx, in, out, count, op);
  else if constexpr (K == collective::reduce_scatter && std::is_same_v<A, algo::direct>)
    return reduce_scatter_direct(ctx, in, out, count, op);
  else if constexpr (K == collective::reduce_scatter && std::is_same_v<A, algo::ring>)
    return reduce_scatter_ring(ctx, in, out, count, op);
  else if constexpr (K == collective::all_gather && std::is_same_v<A, algo::direct>)
    return all_gather_direct(ctx, in, out, count, op);
  else if constexpr (K == collective::all_gather && std::is_same_v<A, algo::ring>)
    return all_gather_ring(ctx, in, out, count, op);
  else if constexpr (K == collective::broadcast && std::is_same_v<A, algo::direct>)
    return broadcast_direct(ctx, in, out, count, root, op);
  else if constexpr (K == collective::reduce && std::is_same_v<A, algo::direct>)
    return reduce_direct(ctx, in, out, count, root, op);
  else if constexpr (K == collective::all_to_all && std::is_same_v<A, algo::direct>)
    return all_to_all_direct(ctx, in, out, count, op);
  else if constexpr (K == collective::gather && std::is_same_v<A, algo::direct>)
    return gather_direct(ctx, in, out, count, root, op);
  else if constexpr (K == collective::scatter && std::is_same_v<A, algo::direct>)
    return scatter_direct(ctx, in, out, count, root, op);
  else
    static_assert(ark::detail::dependent_false<A>,
                  "ark: this algorithm does not implement this collective "
                  "(all_reduce: one_shot, one_step, one_step_world, two_shot, ring; reduce_scatter and "
                  "all_gather: direct, ring; broadcast, reduce, all_to_all, gather and scatter: direct)");
}

} // namespace algorithms
} // namespace ark
