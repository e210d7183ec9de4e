// ark/concepts/device.hpp: the platform a rank runs on (host threads, a CUDA GPU, a HIP GPU).
//
// Everything that differs between vendors and the CPU sits behind this concept; algorithms are
// written once against it. A type P models `device` when it provides, as static members:
//
//   1. Scoped atomics on 64-bit flags, at system scope (visible to peers and to the host):
//      load_acquire, load_relaxed, store_release, store_relaxed, fetch_add (acq_rel), a 32-bit
//      compare_exchange and load_relaxed (to claim the error record, and to see that it was
//      claimed) and store_release (to publish it), fence() (acq_rel, system scope), and
//      store_after_reads: a store ordered after the scope's earlier loads (after a barrier) but
//      not necessarily after its stores; it acknowledges that a slot has been read; and its
//      counterpart load_before_writes: a load ordered before later stores (a sender's credit).
//   2. A clock for deadlines, now_ns() (monotonic nanoseconds), and pause(spins), the spin-wait
//      hint, which may back off with the number of spins so far. A platform whose device clock
//      runs at a rate now_ns() can only assume (ROCm's wall clock) also gives
//      device_span_ns(ns, device): a span of host time in now_ns()'s units (detail::span_on_clock).
//   3. Vector access to data: load<V>/store<V> for local memory, load_peer<V> for memory that peers
//      write (it must not return stale cached data once a flag was acquired), with V of 8 or 16.
//   4. LL packets: store_ll(p, a, b) writes 16 bytes as two 64-bit halves, each half single-copy
//      atomic; load_ll(p, a, b) reads them the same way. A half carries 32 data bits and a 32-bit flag.
//      A packet read orders the sender's loads before it (behind a barrier) before the reader's
//      stores after it (behind a barrier), as store_after_reads/load_before_writes do: a credit.
//   5. Memory of a rank visible to its peers: `memory` (an owning record), allocate(bytes, device),
//      release(memory&), free_memory(device) (the bytes free there now: 0 if unknown),
//      export_handle(memory) -> `ipc_handle` (trivially copyable), and
//      import_handle(ipc_handle, device) -> void* mapping a peer's memory into this address space,
//      close_import(void*) undoing it.
//      Host-visible control memory: allocate_control(bytes) -> `control_memory`, with host and
//      device addresses.
//      zero(p, bytes) clears memory allocate() returned or the user provided; copy(dst, src,
//      bytes) copies between host memory and the platform's memory, synchronously.
//   6. A way to run a rank's work on its threads: `stream`, a copyable handle to an ordered queue
//      of work (create_stream, destroy_stream, synchronize, order_after(s, before, event): s's
//      later work waits for before's work so far, through an `event` made by create_event(device)
//      and freed by destroy_event, both outside calls), and launch(stream, launch_shape, f),
//      which calls f(g, worker, workers) once per thread, g being the thread's scope (one per
//      worker), worker in [0, workers). `synchronous_launch` says whether launch returns only
//      once the work is done (the host) or enqueues it (GPUs). copy_async(dst, src, bytes, s):
//      a copy ordered on s (a copy engine on GPUs; done at once where launches are synchronous).
//
// Refinements (what a host facade and the engines need beyond that, stated once):
//   async_device: launches enqueue work (GPUs). Streams with a priority, events recorded and
//      waited for separately (record, wait_for), whether a stream is being captured into a graph
//      (capturing) and on which device it is (stream_device), use_device(d) for a thread that
//      serves a rank, write_value_async(s, p, v) (a stream-ordered 8-byte store after the
//      stream's earlier copies), preload(s, work) (load launch's kernel for `work` now, not at its
//      first launch), device_span_ns (item 2) and max_worker_threads.
//   shared_device (item 7): ranks may share a processor.
//   7. For platforms whose ranks may share a processor (shared_device): placement(device) -> a
//      `gpu_placement` naming the GPU as every process of the node does, its SMs, the process
//      and the context's hardware queues. Ranks on one GPU then split its SMs, and the
//      copy-engine collectives refuse to run where ranks of one context would have to share
//      queues (team/residency.hpp). The host platform has none: its ranks are threads, and every
//      thread runs.
//
// Thread and rank identity are passed in (the scope, the worker index, the team handle); nothing
// in an algorithm reads them from a global. Models: platform::host (ark/platform/host.hpp),
// platform::cuda (ark/platform/cuda.hpp), platform::hip (ark/platform/hip.hpp).
#pragma once

#include "ark/core/vec.hpp"

#include <concepts>
#include <cstddef>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace ark {

/// How many workers (independent groups: GPU blocks, host thread teams) and threads per worker a
/// launch uses.
struct launch_shape {
  unsigned workers = 1;
  unsigned threads = 1;
  /// May become resident before the stream's previous work has ended (GPUs that support it:
  /// programmatic dependent launch); the work still starts only after that work has ended.
  bool early = false;
};

/// Where a rank's kernels run (device concept, item 7): its GPU's PCI address, the same string in
/// every process of the node, that GPU's multiprocessor count, the rank's process (a token no
/// other process of the node has: ranks of one process on one GPU share its context) and the
/// hardware queues that context spreads its streams over.
struct gpu_placement {
  char pci[32] = {};
  std::int32_t sms = 0;
  std::int32_t queues = 0;
  std::uint64_t process = 0;
};

namespace detail {
/// A stand-in for the work a platform launches, used to check the concept.
struct archetype_work {
  template <class G>
  ARK_HD void operator()(G&, unsigned, unsigned) const {}
};
} // namespace detail

template <class P>
concept device = requires {
  typename P::stream;
  typename P::memory;
  typename P::ipc_handle;
  typename P::control_memory;
  P::name;
}
&&std::is_convertible_v<decltype(P::name), const char*>&&
    std::is_trivially_copyable_v<typename P::ipc_handle>&& requires(std::uint64_t* f, const std::uint64_t* cf,
                                                                    std::uint64_t v, std::uint32_t* w,
                                                                    std::uint32_t u, unsigned spins, void* p,
                                                                    const void* cp, vec<8> v8, vec<16> v16,
                                                                    std::uint64_t& a) {
  // 1. atomics
  { P::load_acquire(cf) } -> std::same_as<std::uint64_t>;
  { P::load_relaxed(cf) } -> std::same_as<std::uint64_t>;
  { P::store_release(f, v) } -> std::same_as<void>;
  { P::store_relaxed(f, v) } -> std::same_as<void>;
  { P::store_after_reads(f, v) } -> std::same_as<void>;
  { P::load_before_writes(cf) } -> std::same_as<std::uint64_t>;
  { P::fetch_add(f, v) } -> std::same_as<std::uint64_t>;
  { P::compare_exchange(w, u, u) } -> std::same_as<bool>;
  { P::load_relaxed(static_cast<const std::uint32_t*>(w)) } -> std::same_as<std::uint32_t>;
  { P::store_release(w, u) } -> std::same_as<void>;
  { P::fence() } -> std::same_as<void>;
  // 2. clock
  { P::now_ns() } -> std::same_as<std::uint64_t>;
  { P::pause(spins) } -> std::same_as<void>;
  // 3. vectors
  { P::template load<16>(cp) } -> std::same_as<vec<16>>;
  { P::template load<8>(cp) } -> std::same_as<vec<8>>;
  { P::template load_peer<16>(cp) } -> std::same_as<vec<16>>;
  { P::template store<16>(p, v16) } -> std::same_as<void>;
  { P::template store<8>(p, v8) } -> std::same_as<void>;
  // 4. LL packets
  { P::store_ll(f, v, v) } -> std::same_as<void>;
  { P::load_ll(cf, a, a) } -> std::same_as<void>;
}
&&requires(std::size_t n, int dev, typename P::memory& m, const typename P::ipc_handle& h,
           typename P::control_memory& c, typename P::stream s, typename P::event e, launch_shape shape,
           const detail::archetype_work& work, void* p) {
  // 5. memory
  { P::allocate(n, dev) } -> std::same_as<typename P::memory>;
  { P::release(m) } -> std::same_as<void>;
  { P::free_memory(dev) } -> std::same_as<std::size_t>;
  { P::export_handle(m) } -> std::same_as<typename P::ipc_handle>;
  { P::import_handle(h, dev) } -> std::same_as<void*>;
  { P::close_import(p) } -> std::same_as<void>;
  { P::allocate_control(n) } -> std::same_as<typename P::control_memory>;
  { P::release_control(c) } -> std::same_as<void>;
  { P::zero(p, n) } -> std::same_as<void>;
  { P::copy(p, p, n) } -> std::same_as<void>;
  // 6. execution
  { P::create_stream(dev) } -> std::same_as<typename P::stream>;
  { P::destroy_stream(s) } -> std::same_as<void>;
  { P::synchronize(s) } -> std::same_as<void>;
  { P::create_event(dev) } -> std::same_as<typename P::event>;
  { P::destroy_event(e) } -> std::same_as<void>;
  { P::order_after(s, s, e) } -> std::same_as<void>;
  { P::launch(s, shape, work) } -> std::same_as<void>;
  { P::copy_async(p, p, n, s) } -> std::same_as<void>;
  { P::synchronous_launch } -> std::same_as<const bool&>;
};

/// A device whose launches enqueue work on streams (GPUs): see the refinements above.
template <class P>
concept async_device = device<P> && !P::synchronous_launch &&
                       requires(typename P::stream s, typename P::event e, int dev, std::uint64_t* f,
                                std::uint64_t v, const detail::archetype_work& work) {
  { P::create_stream(dev, dev) } -> std::same_as<typename P::stream>;
  { P::record(e, s) } -> std::same_as<void>;
  { P::wait_for(s, e) } -> std::same_as<void>;
  { P::capturing(s) } -> std::same_as<bool>;
  { P::stream_device(s) } -> std::same_as<int>;
  { P::use_device(dev) } -> std::same_as<void>;
  { P::write_value_async(s, f, v) } -> std::same_as<void>;
  { P::preload(s, work) } -> std::same_as<void>;
  { P::device_span_ns(v, dev) } -> std::same_as<std::uint64_t>;
  { P::max_worker_threads } -> std::convertible_to<unsigned>;
};

/// A device whose ranks may share one processor (item 7): where each rank runs, and the hardware
/// queues of a context, named by the environment variable that sets them.
template <class P>
concept shared_device = device<P> && requires(int dev) {
  { P::placement(dev) } -> std::same_as<gpu_placement>;
  { P::hardware_queues_variable } -> std::convertible_to<const char*>;
};

namespace detail {

/// A span of `ns` nanoseconds as a clock counts it that ticks at `actual_khz` where the code reading
/// it assumes `assumed_khz` (ROCm's wall_clock64(): 100 MHz on gfx90a and gfx94x, 25 MHz on
/// gfx908). Saturates; an unknown rate (0) leaves the span as it is.
inline std::uint64_t span_on_clock(std::uint64_t ns, std::uint64_t assumed_khz, std::uint64_t actual_khz) {
  if (assumed_khz == 0 || actual_khz == 0 || assumed_khz == actual_khz) return ns;
  const unsigned __int128 v = static_cast<unsigned __int128>(ns) * actual_khz / assumed_khz;
  return v > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(v);
}

} // namespace detail

} // namespace ark
