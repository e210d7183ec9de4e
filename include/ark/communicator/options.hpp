// ark/communicator/options.hpp: what a user sets: a communicator's configuration, one call's
// options, and what a call will use (call_plan, answered before the call); the defaults per
// platform.
#pragma once

#include "ark/collectives/select.hpp"
#include "ark/concepts/device.hpp"
#include "ark/dma/engine_queue.hpp"
#include "ark/team/layout.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ark {

/// Options of one call; zero means "the communicator's default".
template <device P>
struct call_options {
  typename P::stream stream{}; ///< the stream the call is enqueued on (its priority applies)
  unsigned workers = 0;        ///< thread blocks (host: thread teams) to use; 0: chosen by size
  std::chrono::nanoseconds timeout{0};
  /// SM budget: the most thread blocks the call may occupy (-1: no limit). 0: the copy engine
  /// alone moves the data, for the collectives that allow it (all_gather and broadcast into a
  /// registered recv buffer): no kernel moves bytes; one warp waits.
  int max_ctas = -1;
  bool operator==(const call_options&) const = default;
};

/// What a call will use, known before it is made (communicator::plan).
struct call_plan {
  std::uint8_t algorithm = 0; ///< algo::*::id (the resolved choice)
  std::uint8_t backend = 0;   ///< dma backend id (0 for the copy-engine-only path)
  unsigned ctas = 0;          ///< thread blocks occupied (GPU) / thread teams (host)
  unsigned threads = 0;       ///< threads per block
  bool copy_engine_only = false;
  /// A one-shot all-reduce over LL packets whose every worker's share fits one LL step: a call
  /// that algo::one_step may run (with the same workers and threads), in a persistent kernel too.
  bool one_step = false;
  std::size_t scratch_bytes = 0; ///< bytes of the symmetric region the call's channels occupy
};

/// What a communicator holds (communicator::memory()), by kind of memory. Device memory is the
/// platform's (a GPU's HBM; the host platform's own memory on the host).
struct memory_report {
  std::size_t scratch = 0;       ///< the symmetric region (required_scratch())
  bool scratch_is_users = false; ///< config::scratch: the region is the user's memory, not the communicator's
  std::size_t engine_queues = 0; ///< the DMA engine's request queues (with staging)
  bool engine_queues_on_device = false; ///< device memory (device graphs); else host-mapped (the CPU proxy)
  std::size_t graph_tables = 0;         ///< device graphs: tickets, counters, the graph table (device memory)
  std::size_t graphs = 0;     ///< copy graphs instantiated (each also holds the driver's memory, not counted)
  std::size_t control = 0;    ///< the control block (host-mapped)
  std::size_t windows = 0;    ///< buffers registered with register_buffer (the user's memory)
  std::size_t streams = 0;    ///< streams the communicator holds
  unsigned workers = 0;       ///< the collectives' workers the scratch holds slots for (layout::workers)
  unsigned p2p_workers = 0;   ///< the point-to-point workers it holds slots for (layout::p2p)
  std::size_t slot_bytes = 0; ///< their slots' payload (layout::slot_bytes)
  /// Device memory the communicator allocated itself.
  std::size_t device_bytes() const {
    return (scratch_is_users ? 0 : scratch) + (engine_queues_on_device ? engine_queues : 0) + graph_tables;
  }
  /// Host-mapped memory it allocated.
  std::size_t host_mapped_bytes() const { return control + (engine_queues_on_device ? 0 : engine_queues); }
};

/// Default tuning per platform. GPUs: a 512-thread block per worker; LL packets up to 1 MB,
/// a block per 4 KB (one packet per thread) up to 128 blocks; thread copies over a
/// block per 32 KB; one-shot up to 8 MB, then two-shot: the crossovers measured best
/// (docs/perf.md).
template <device P>
tuning default_tuning() {
  tuning t;
  if constexpr (!P::synchronous_launch) {
    t.threads = 512;
    t.ll_max_bytes = 1 << 20;
    t.one_shot_max_bytes = 8 << 20;
    t.bytes_per_worker = 32 << 10;
    t.ll_bytes_per_worker = 4 << 10;
  }
  return t;
}

/// Default sizes of the symmetric region per platform. GPUs: automatic slots in 64 MB at any
/// world (team_config::scratch_budget): at least 16 workers with slots as large as fit (128 to
/// 256 KB), then as many more as fit, up to 128, which keeps large messages' bandwidth
/// (docs/perf.md, "Bounded scratch"); depth 2 (default_depth). memory() and required_scratch()
/// say what a configuration holds. Explicit slot_bytes take the region back to workers x
/// (world - 1) x (max_depth + 1) slots.
template <device P>
team_config default_team() {
  team_config c;
  if constexpr (!P::synchronous_launch) {
    c.workers = 128;
    c.max_depth = default_depth;
    c.slot_bytes = 0;
    c.scratch_budget = 64 << 20;
    c.ll_slot_bytes = 16 << 10;
    c.staging = false; // engine backends (proxy_engine, tma) need it: team_config.staging = true
  }
  return c;
}

/// A communicator's configuration (communicator<P>::config): the same on every rank, which the
/// communicator checks when it is built.
template <device P>
struct communicator_config {
  team_config team = default_team<P>();
  ark::tuning tuning = default_tuning<P>();
  std::chrono::milliseconds timeout{5000}; ///< a wait that makes no progress this long fails
  int device = 0;                          ///< GPU ordinal of this rank (ignored on the host)
  void* scratch = nullptr;                 ///< optional user-provided symmetric region
  std::size_t scratch_size = 0;            ///< its size; at least required_scratch(world, team)
  /// Priority of the communicator's own streams (its default stream and, on GPUs, the copy-engine
  /// streams of proxy_engine): as cudaStreamCreateWithPriority, lower numbers run first; 0 is the
  /// default. A call on a user stream runs at that stream's priority.
  int stream_priority = 0;
  /// Who serves dma::proxy_engine's requests: a CPU thread (engine_path::proxy, every platform),
  /// or, on CUDA built with -rdc=true and linked with cudadevrt, a launcher kernel that fires
  /// pre-instantiated copy graphs from the GPU with no CPU on the path
  /// (engine_path::device_graphs; dma/graph_engine.hpp: meant for MB-sized slots). Device graphs
  /// serve the calls this communicator enqueues, not calls made from inside your own kernels.
  engine_path engine = engine_path::proxy;
  /// GPUs: launch each call's kernel early (CUDA's programmatic dependent launch, code built
  /// for sm_90 on): its blocks become resident while the stream's previous kernel ends, and
  /// wait for it there, which takes the launch gap off back-to-back calls, captured graphs
  /// included. Calls served by device graphs are launched plainly. Every collective kernel
  /// lets the stream's next early-launched kernel (an ark call, or yours if you launch it so)
  /// become resident as soon as it starts: that kernel's blocks then hold SMs while they wait.
  bool early_launch = true;
  /// dma::copy_engine all-reduce: bytes of each rank's chunk a round moves to each peer (at
  /// most half of the scratch part each sender has). Rounds pipeline: round k's copies run
  /// while round k - 1 is reduced and its result copied out (communicator/ce_protocol.hpp).
  /// Each round costs a few stream operations, so rounds are large (docs/perf.md).
  std::size_t ce_chunk_bytes = std::size_t(32) << 20;
};

} // namespace ark
