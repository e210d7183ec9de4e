// ark/communicator/checks.hpp: the argument checks every call makes before anything launches.
// Each throws invalid_argument naming the call and what is wrong; none corrects a value silently.
#pragma once

#include "ark/communicator/runtime.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

namespace ark::detail {

inline std::string pointer_name(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

/// `count` elements of T in `blocks` blocks, with room to spare: byte counts never overflow.
template <class T>
void check_elements(const char* call, std::size_t count, int blocks) {
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T) / static_cast<std::size_t>(blocks) / 2)
    throw_invalid(call, "count " + std::to_string(count) + " is too large");
}

/// A buffer of `count` elements: not null unless empty, aligned to its element type.
template <class T>
void check_buffer(const char* call, const char* name, const T* p, std::size_t count) {
  if (count && !p) throw_invalid(call, std::string(name) + " is null but count is " + std::to_string(count));
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T))
    throw_invalid(call, std::string(name) + " " + pointer_name(p) + " is not aligned to its element type (" +
                            std::to_string(alignof(T)) + " bytes)");
}

/// Partially overlapping buffers are an error; `in_place` is the one overlap allowed.
template <class T>
void check_overlap(const char* call, const T* in, std::size_t nin, const T* out, std::size_t nout,
                   bool in_place) {
  if (in_place || !in || !out || !nin || !nout) return;
  if (in < out + nout && out < in + nin)
    throw_invalid(call, "send and recv buffers overlap without being in place");
}

/// Which of its send and receive buffers collective K on `count` elements a block uses on rank
/// `rank` of `world`, and their elements: the root's alone where the others' are not used
/// (`every_out`: the receive buffer on every rank, as the copy engine's gather needs).
struct collective_extent {
  bool uses_in, uses_out;
  std::size_t in, out;
};
/// Collectives whose send (receive) buffer holds one block of `count` elements per rank.
constexpr bool blocked_in(collective k) {
  return k == collective::reduce_scatter || k == collective::all_to_all || k == collective::scatter;
}
constexpr bool blocked_out(collective k) {
  return k == collective::all_gather || k == collective::all_to_all || k == collective::gather;
}
template <collective K>
collective_extent extent_of(std::size_t count, int root, int rank, int world, bool every_out = false) {
  const std::size_t w = static_cast<std::size_t>(world);
  const bool uses_in = (K != collective::broadcast && K != collective::scatter) || rank == root;
  const bool uses_out = (K != collective::reduce && K != collective::gather) || rank == root || every_out;
  return {uses_in, uses_out, uses_in ? (blocked_in(K) ? count * w : count) : 0,
          uses_out ? (blocked_out(K) ? count * w : count) : 0};
}

/// The arguments of collective K as rank `rank` of `world` names them: the count, the root,
/// each buffer the rank uses (extent_of), and no overlap short of the collective's in-place form.
template <collective K, class T>
void check_collective(const char* call, const T* in, const T* out, std::size_t count, int root, int rank,
                      int world, bool every_out = false) {
  check_elements<T>(call, count, blocked_in(K) || blocked_out(K) ? world : 1);
  if constexpr (has_root(K)) check_root(call, root, world);
  const collective_extent e = extent_of<K>(count, root, rank, world, every_out);
  if (e.uses_in) check_buffer(call, "send buffer", in, e.in);
  if (e.uses_out) check_buffer(call, "recv buffer", out, e.out);
  if (!e.uses_in || !e.uses_out) return;
  const std::size_t r = static_cast<std::size_t>(rank);
  bool in_place = false;
  switch (K) {
  case collective::reduce_scatter:
    in_place = out == in + r * count;
    break;
  case collective::all_gather:
  case collective::gather:
    in_place = in == out + r * count;
    break;
  case collective::scatter:
    in_place = out == in + static_cast<std::size_t>(root) * count;
    break;
  case collective::all_to_all:
    break;
  default:
    in_place = in == out;
  }
  check_overlap(call, in, e.in, out, e.out, in_place);
}

/// A call or launch that asks for more workers than the ranks sharing a GPU may each hold.
template <device P>
void check_block_cap(const rank_runtime<P>& rt, const char* call, unsigned workers) {
  if (rt.block_cap() && workers > rt.block_cap())
    throw_invalid(call, "workers " + std::to_string(workers) + " is more than the " +
                            std::to_string(rt.block_cap()) +
                            " blocks a call may use while ranks share a GPU (every block of "
                            "every rank's call must be resident at once: block_cap())");
}

/// The options every call shares, refused as they are, never corrected: a negative timeout, an
/// SM budget below -1 or below the workers asked for, a stream on another GPU than this rank's
/// (its kernels would run there, on memory of this GPU).
template <device P>
void check_options(const rank_runtime<P>& rt, const char* call, const call_options<P>& o) {
  if (o.timeout.count() < 0) throw_invalid(call, "timeout must be 0 (the communicator's) or positive");
  if (o.max_ctas < -1) throw_invalid(call, "max_ctas must be -1 (no limit), 0 or positive");
  if (o.workers && o.max_ctas > 0 && o.workers > static_cast<unsigned>(o.max_ctas))
    throw_invalid(call,
                  "workers " + std::to_string(o.workers) + " exceeds max_ctas " + std::to_string(o.max_ctas));
  if constexpr (async_device<P>) {
    if (o.stream && o.stream != rt.own_stream()) {
      const int d = P::stream_device(o.stream); // -1 while it is being captured: CUDA checks then
      if (d >= 0 && d != rt.cfg().device)
        throw_invalid(call, "the stream is on GPU " + std::to_string(d) + ", this rank's GPU is " +
                                std::to_string(rt.cfg().device));
    }
  }
}

/// The copy-engine collectives wait on streams (a warp spins until the peers' flags arrive) and
/// put copies behind those waits. Streams that share a hardware queue run their steps in the
/// order they were enqueued, so where ranks share a context (one process, one GPU) a rank's
/// copy behind its wait can hold up the peer's step that the wait needs: every stream of every
/// such rank needs a queue of its own (docs/perf.md). The queues are those each rank's
/// placement reported when it was built (the runtime reads them once, when it starts), so every
/// rank refuses the same calls.
template <device P>
void check_hardware_queues(const rank_runtime<P>& rt, const char* call, std::size_t streams) {
  if constexpr (shared_device<P>) {
    const queue_share& t = rt.queues();
    if (streams > t.per_rank)
      throw_invalid(call, std::to_string(t.ranks) + " ranks share a GPU in one process with " +
                              std::to_string(t.queues) + " hardware queues, and the copy engine's " +
                              std::to_string(streams) + " stream(s) per rank need " +
                              std::to_string(streams * t.ranks) + ": set " +
                              std::string(P::hardware_queues_variable) +
                              " (32 at most) before the GPU runtime starts");
  } else {
    (void)rt, (void)call, (void)streams;
  }
}

/// A backend the communicator was set up for: its depth within max_depth, staging if it needs it:
/// an engine backend stages what it sends, and a queue backend's engine runs only with staging,
/// so a zero-copy call (which stages nothing) needs it over a queue backend alone.
template <class B>
void check_backend(const layout& l, const char* call, bool zero_copy = false) {
  if (B::depth > l.max_depth())
    throw_invalid(call, "pipeline depth " + std::to_string(B::depth) + " exceeds team_config.max_depth " +
                            std::to_string(l.max_depth()));
  if (!B::direct && !l.has_staging() && (!zero_copy || dma::queue_backend<B>))
    throw_invalid(call, "this DMA backend needs staging (team_config.staging = true)");
}

} // namespace ark::detail
