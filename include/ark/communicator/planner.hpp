// ark/communicator/planner.hpp: what a call will use, decided before it launches: the algorithm
// and backend an automatic choice resolves to (collectives/select.hpp), the blocks and threads,
// the scratch its channels occupy, whether only the copy engine moves bytes. Every rank computes
// the same plan from the same (collective, count, world, configuration), so plans need no
// agreeing on. A call the plan refuses is refused before anything launches.
#pragma once

#include "ark/communicator/checks.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace ark::detail {

/// Elements of T one round of the copy-engine all-reduce moves per sender: half the sender's
/// scratch part, at most config::ce_chunk_bytes, on vector boundaries (0: too small for one).
template <class T>
std::size_t ce_round_elems(const layout& l, std::size_t ce_chunk_bytes) {
  return std::min<std::size_t>(l.ce_scratch_bytes() / 2, ce_chunk_bytes) / sizeof(T) / align_elems<T> *
         align_elems<T>;
}
/// The longest rank's chunk of `count` elements (the all-reduce's rounds follow it).
template <class T>
std::size_t ce_longest_chunk(std::size_t count, int world) {
  std::size_t longest = 0;
  for (int r = 0; r < world; ++r)
    longest = std::max(longest, split({0, count}, world, r, align_elems<T>).len);
  return longest;
}

/// The plan of collective K by A over B (either may be automatic) on `count` elements of T per
/// rank; `zero_copy`: it reads registered buffers in place (algo::zero_copy). Throws
/// invalid_argument for options the call would reject.
template <collective K, class A, class B, class T, device P>
call_plan plan_call(const rank_runtime<P>& rt, std::size_t count, const call_options<P>& o,
                    bool zero_copy = false) {
  const char* call = to_string(K);
  const int world = rt.world();
  const layout& l = rt.lay();
  const tuning& tune = rt.cfg().tuning;
  const std::size_t bytes = count * sizeof(T);
  const choice c = select(K, bytes, world, tune);
  call_plan p;
  check_options(rt, call, o);
  // blocks for `b` bytes per worker share: the caller's count, or one per tuning step; at most max_ctas
  auto blocks = [&](std::size_t b, bool ll) {
    unsigned w = o.workers ? o.workers : select_workers(b, l.workers, tune, ll);
    if (o.max_ctas > 0 && w > static_cast<unsigned>(o.max_ctas)) w = static_cast<unsigned>(o.max_ctas);
    if (o.workers)
      check_block_cap(rt, call, w); // asked for: refused above the cap
    else if (rt.block_cap() && w > rt.block_cap())
      w = rt.block_cap();
    return w;
  };
  constexpr bool ce = std::is_same_v<B, dma::copy_engine>;
  if (ce && K == collective::all_reduce) {
    if (o.max_ctas == 0)
      throw_invalid(call, "max_ctas = 0: all_reduce reduces on the SMs; give it at least one block");
    check_hardware_queues(rt, call, 1); // where ranks share a context: the call's stream alone
    p.algorithm = algo::two_shot::id;
    p.backend = dma::copy_engine::id;
    p.ctas = blocks(div_up(count, static_cast<std::size_t>(world)) * sizeof(T), false);
    p.threads = tune.threads;
    if (world > 1) {
      const std::size_t round = ce_round_elems<T>(l, rt.cfg().ce_chunk_bytes);
      if (round == 0)
        throw_invalid(call, "the copy-engine scratch (" + std::to_string(l.ce_scratch_bytes()) +
                                " bytes per sender) or ce_chunk_bytes is too small for one round");
      // each peer's part of our scratch: half 0 holds the even rounds' parts of the longest
      // chunk, half 1 the odd rounds'; and the flags
      const std::size_t longest = ce_longest_chunk<T>(count, world);
      const std::size_t halves =
          std::min(round, longest) + (longest > round ? std::min(round, longest - round) : 0);
      p.scratch_bytes = static_cast<std::size_t>(world - 1) * halves * sizeof(T) +
                        static_cast<std::size_t>(world) * layout::ce_flags * layout::flag_stride;
    }
    return p;
  }
  if (o.max_ctas == 0 || ce) {
    if (!only_copies(K))
      throw_invalid(call,
                    "max_ctas = 0 (copy engine only) is for the collectives that only copy (all_gather, "
                    "broadcast, all_to_all, gather, scatter); this one reduces on the SMs: give it at "
                    "least one block");
    check_hardware_queues(rt, call, 1);
    p.algorithm = algo::direct::id;
    // copies and flag writes on the stream; one warp waits for the peers' flags
    p.ctas = 1;
    p.threads = P::synchronous_launch ? 1 : 32;
    p.copy_engine_only = true;
    p.backend = dma::copy_engine::id;
    p.scratch_bytes = static_cast<std::size_t>(world) * layout::ce_flags * layout::flag_stride;
    return p;
  }
  // the workers whose channels the team holds
  auto held = [&](unsigned workers) {
    if (workers > l.workers)
      throw_invalid(call, "workers " + std::to_string(workers) + " exceeds team_config.workers " +
                              std::to_string(l.workers) +
                              (l.workers < rt.cfg().team.workers
                                   ? " (the workers whose slots fit in team_config.scratch_budget)"
                                   : ""));
    return workers;
  };
  if (zero_copy) { // headers alone pass through the channels: no data slot is used
    p.algorithm = algo::zero_copy::id;
    p.backend = or_thread_copies<B>::id;
    p.ctas = held(blocks(bytes, false));
    p.threads = tune.threads;
    p.scratch_bytes = static_cast<std::size_t>(p.ctas) * l.world *
                      (3 * layout::flag_stride + l.slots * sizeof(slot_header));
    return p;
  }
  constexpr bool one_step = algo::is_one_step<A>;
  if constexpr (algo::fixed_world<A> != 0)
    if (world != algo::fixed_world<A>)
      throw_invalid(call, one_step_world_refusal(algo::fixed_world<A>, world));
  if constexpr (one_step && !std::is_same_v<B, dma::automatic>)
    static_assert(B::ll, "ark: algo::one_step runs over LL packets (dma::ll_packet)");
  p.algorithm = std::is_same_v<A, algo::automatic> ? c.algorithm : A::id;
  bool ll = c.ll || one_step, engine = false;
  if constexpr (!std::is_same_v<B, dma::automatic> && !ce) {
    ll = B::ll, engine = !B::direct;
    p.backend = B::id;
  } else {
    p.backend = ll ? dma::ll_packet<1>::id : dma::thread_copy<1>::id;
  }
  const unsigned workers = held(blocks(bytes, ll));
  p.ctas = workers;
  p.threads = tune.threads;
  if (K == collective::all_reduce && p.algorithm == algo::one_shot::id && ll) {
    // the vector width of the backend the kernel will run: a named one's own (an LL backend may
    // move 16-byte vectors), else ll_packet's
    std::size_t vec_bytes = dma::ll_packet<1>::vec_bytes;
    if constexpr (!std::is_same_v<B, dma::automatic> && !ce) vec_bytes = B::vec_bytes;
    const std::size_t most = algorithms::detail::one_step_max_elems<T>(l, p.threads, vec_bytes);
    std::size_t largest = 0;
    for (unsigned w = 0; w < workers; ++w)
      largest = std::max(largest, split({0, count}, workers, w, align_elems<T>).len);
    p.one_step = largest <= most;
    if (one_step && !p.one_step)
      throw_invalid(
          call, "algo::one_step needs every worker's share to fit one LL step: " + std::to_string(largest) +
                    " elements in a share of " + std::to_string(workers) + " workers, at most " +
                    std::to_string(most) + " fit (use algo::one_shot, or more workers)");
  }
  p.scratch_bytes = static_cast<std::size_t>(workers) * l.world *
                    (3 * layout::flag_stride +
                     (ll ? l.ll_slots * l.ll_slot_stride + l.slots * sizeof(slot_header)
                         : l.slots * (sizeof(slot_header) + l.slot_bytes + (engine ? l.slot_bytes : 0))));
  return p;
}

} // namespace ark::detail
