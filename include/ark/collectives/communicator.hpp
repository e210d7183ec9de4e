// ark/collectives/communicator.hpp: the host-side facade, one object per rank, like an NCCL
// communicator. It owns the rank's symmetric region, maps the peers' regions, checks every
// argument before anything launches, picks an algorithm, launches the device-side code
// (device_comm) on the platform, and turns recorded failures into exceptions.
//
//   auto group = std::make_shared<ark::in_process_group>(world);      // host: ranks are threads
//   ark::communicator<ark::platform::host> comm(ark::in_process_bootstrap(group, rank));
//   comm.all_reduce(in, out, count);                                  // in every rank's thread
#pragma once

#include "ark/bootstrap/in_process.hpp"
#include "ark/collectives/copy_engine.hpp"
#include "ark/collectives/device_comm.hpp"
#include "ark/dma/graph_engine.hpp"
#include "ark/dma/proxy_engine.hpp"
#include "ark/team/residency.hpp"
#if defined(ARK_GPU_COMPILER)
#include "ark/dma/gpu_proxy.hpp"
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

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

/// Default tuning per platform. GPUs: a 512-thread block per worker; LL packets up to 1 MB,
/// a block per 4 KB (one packet per thread) up to 128 blocks; thread copies over a
/// block per 32 KB; one-shot up to 8 MB, then two-shot (docs/perf.md: the measurements).
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

/// Default sizes of the symmetric region per platform. GPUs: 512 KB slots, measured best for
/// large messages (2 x H200, run m in docs/perf.md: two-shot at 256 MB-1 GB 311-333 GB/s
/// graph-launched against 273-280 with 64 KB slots; 256 KB and 1 MB slots lower). The region
/// then holds workers x world x (max_depth + 1) slots: 640 MB of data slots at two ranks,
/// 2.6 GB at eight (required_scratch() says; set team_config::slot_bytes to trade).
template <device P>
team_config default_team() {
  team_config c;
  if constexpr (!P::synchronous_launch) {
    c.workers = 128;
    c.max_depth = 4;
    c.slot_bytes = 512 << 10;
    c.ll_slot_bytes = 16 << 10;
    c.staging = false; // engine backends (proxy_engine, tma) need it: team_config.staging = true
  }
  return c;
}

namespace detail {
/// What drains a rank's engine queues (dma::proxy_engine) on platform P.
template <class P>
struct engine_service {
  struct none {};
  using type = none;
};
template <>
struct engine_service<platform::host> {
  using type = dma::host_proxy;
};
#if defined(ARK_GPU_COMPILER)
template <>
struct engine_service<platform::gpu> {
  using type = dma::gpu_proxy;
};
#endif

/// What serves the engine queues when a communicator asks for engine_path::device_graphs.
template <class P>
struct graph_service {
  struct none {};
  using type = none;
  static constexpr bool available = false;
};
template <>
struct graph_service<platform::host> { // the host model: a launcher thread and a copy pool
  using type = dma::host_graph_engine;
  static constexpr bool available = true;
};
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
template <>
struct graph_service<platform::gpu> {
  using type = dma::graph_engine;
  static constexpr bool available = true;
};
#endif

/// Backends whose requests a device-graph launcher serves: proxy_engine and those built on it.
template <class B>
inline constexpr bool is_proxy_engine = requires(const team_view& t) {
  B::served(t);
};

/// The control block, then the engine queues: one host-visible allocation.
inline constexpr std::size_t engine_offset = (sizeof(control_block) + 255) / 256 * 256;

/// The work a communicator launches: one collective, run by every worker through device_comm.
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
#if defined(ARK_DEVICE_PASS)
  /// The arguments of a call, in registers the compiler cannot trace back to the kernel's
  /// parameters (gpu::opaque), so that what prepare() computes from them is reused after the
  /// wait for the previous kernel (run_workers) instead of computed again.
  struct prepared {
    std::size_t count;
    unsigned worker, workers;
    int root;
  };
  /// Before the wait: the call's tag and, for one-shot all-reduce, the worker's share (its
  /// divisions). run() computes both again, from the same registers: the compiler reuses these.
  ARK_DEVICE prepared prepare(unsigned worker, unsigned workers) const {
    const prepared p{gpu::opaque(std::uint64_t{count}), gpu::opaque(std::uint32_t{worker}),
                     gpu::opaque(std::uint32_t{workers}),
                     static_cast<int>(gpu::opaque(static_cast<std::uint32_t>(root)))};
    gpu::compute_here(describe_call<K, A, B, T, Op>(p.workers, p.root, p.count).tag());
    if constexpr (K == collective::all_reduce &&
                  (std::is_same_v<A, algo::one_shot> || algo::is_one_step<A>)) {
      const elem_range share = split({0, p.count}, p.workers, p.worker, align_elems<T>);
      gpu::compute_here(share.begin);
      gpu::compute_here(share.len);
    }
    return p;
  }
  template <class G>
  ARK_DEVICE void operator()(G& g, const prepared& p) const {
    comm.template run<K, A, B>(g, p.worker, p.workers, in, out, p.count, p.root, op);
  }
#endif
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

/// A barrier of worker 0 of every rank (used when a communicator is torn down).
template <device P>
struct barrier_work {
  device_comm<P> comm;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    comm.template make_context<dma::thread_copy<1>>(g, worker, workers, call_desc{}).barrier();
  }
};
} // namespace detail

template <device P>
class communicator {
public:
  struct config {
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
    /// while round k - 1 is reduced and its result copied out (collectives/copy_engine.hpp).
    /// Each round costs a few stream operations (µs each): 32 MB measured best of 4-32 MB on
    /// 2 x H200 (docs/perf.md).
    std::size_t ce_chunk_bytes = std::size_t(32) << 20;
  };

  /// Bytes of symmetric memory a rank needs for `world` ranks and this team configuration.
  static std::size_t required_scratch(int world, const team_config& t) { return make_layout(world, t).total; }

  /// Collective: every rank constructs its communicator with the same configuration.
  template <bootstrap Boot>
  explicit communicator(Boot boot, config cfg = {})
      : cfg_(std::move(cfg)), boot_(new boot_holder<Boot>(std::move(boot))) {
    const int world = boot_->size(), rank = boot_->rank();
    team_.rank = rank;
    team_.world = world;
    team_.lay = make_layout(world, cfg_.team);
    team_.timeout_ns = device_span(cfg_.timeout);
    if (cfg_.timeout.count() <= 0) detail::throw_invalid("communicator", "timeout must be positive");
    if (cfg_.ce_chunk_bytes == 0) detail::throw_invalid("communicator", "ce_chunk_bytes must be positive");
    if (cfg_.tuning.threads == 0 || cfg_.tuning.bytes_per_worker == 0 || cfg_.tuning.ll_bytes_per_worker == 0)
      detail::throw_invalid(
          "communicator",
          "tuning.threads, tuning.bytes_per_worker and tuning.ll_bytes_per_worker must be positive");
    if constexpr (requires { P::max_worker_threads; })
      if (cfg_.tuning.threads > P::max_worker_threads)
        detail::throw_invalid("communicator", "tuning.threads is " + std::to_string(cfg_.tuning.threads) +
                                                  ", more than the " + std::to_string(P::max_worker_threads) +
                                                  " threads per block the collective kernel is built for");
    const bool graphs = cfg_.engine == engine_path::device_graphs;
    if (graphs && !detail::graph_service<P>::available)
      detail::throw_invalid("communicator",
                            "engine_path::device_graphs needs CUDA device graph launch: compile "
                            "with nvcc -rdc=true and link with -lcudadevrt (HIP has none: use "
                            "engine_path::proxy)");
    if (graphs && !team_.lay.has_staging())
      detail::throw_invalid("communicator",
                            "engine_path::device_graphs serves dma::proxy_engine, which needs "
                            "staging (team_config.staging = true)");
    if (cfg_.scratch) {
      if (cfg_.scratch_size < team_.lay.total)
        detail::throw_invalid("communicator", "user scratch of " + std::to_string(cfg_.scratch_size) +
                                                  " bytes is smaller than the " +
                                                  std::to_string(team_.lay.total) + " bytes required");
      if (reinterpret_cast<std::uintptr_t>(cfg_.scratch) % 256)
        detail::throw_invalid("communicator", "user scratch must be 256-byte aligned");
    }
    // Whatever fails from here on releases what was made: no peer can write into our region yet,
    // since a peer's communicator exists only once every rank passed the closing barrier
    try {
      setup(graphs);
    } catch (...) {
      release(true);
      throw;
    }
    try {
      boot_->barrier();
    } catch (...) { // peers past the barrier may write into our region: it is kept (leaked)
      release(false);
      throw;
    }
  }

private:
  /// The constructor's work after its checks: memory, streams, the exchange, the engines.
  void setup(bool graphs) {
    const int world = team_.world, rank = team_.rank;
    if (cfg_.scratch) {
      region_.ptr = static_cast<std::byte*>(cfg_.scratch);
      region_.bytes = cfg_.scratch_size;
      owns_region_ = false;
      P::zero(region_.ptr, team_.lay.total);
    } else {
      region_ = P::allocate(team_.lay.total, cfg_.device);
    }
    team_.engine_server = cfg_.engine;
    team_.launcher_beside = graphs && std::is_same_v<P, platform::host>; // the host model's is a thread
    control_ = P::allocate_control(detail::engine_offset + (graphs ? 0 : team_.lay.engine_bytes()));
    team_.ctl = static_cast<control_block*>(control_.device_ptr);
    if (graphs) { // the launcher polls the queues: device memory
      engine_mem_ = P::allocate(team_.lay.engine_bytes(), cfg_.device);
      team_.engine = engine_mem_.ptr;
    } else if (team_.lay.has_staging()) {
      team_.engine = static_cast<std::byte*>(control_.device_ptr) + detail::engine_offset;
    }
    // every stream now, the copy-engine all-reduce's too: a stream created once calls run can wait
    // for the kernels on the GPU, ours among them, waiting for this rank (dma/gpu_proxy.hpp)
    stream_ = P::create_stream(cfg_.device, cfg_.stream_priority);
    for (auto& s : ce_side_) s = P::create_stream(cfg_.device, cfg_.stream_priority);
    order_ = P::create_event(cfg_.device); // and the event that orders them
    has_order_ = true;

    // Exchange where every region lives and which GPU every rank runs on, and check that every
    // rank configured the same layout, and what makes its calls' choices: a rank that chose
    // another algorithm, backend or worker count than its peers would wait for them until the
    // timeout; one that counted another block cap would refuse a call they make
    struct card {
      typename P::ipc_handle handle;
      std::uint64_t total, workers, max_depth, slot_bytes, ll_slot_bytes, ce_chunk_bytes;
      tuning tune;
      std::uint8_t early_launch, engine;
      gpu_placement where;
    };
    card mine{P::export_handle(region_),
              team_.lay.total,
              team_.lay.workers,
              team_.lay.max_depth(),
              team_.lay.slot_bytes,
              team_.lay.ll_slot_bytes,
              cfg_.ce_chunk_bytes,
              cfg_.tuning,
              static_cast<std::uint8_t>(cfg_.early_launch),
              static_cast<std::uint8_t>(cfg_.engine),
              {}};
    if constexpr (shares_processors) mine.where = P::placement(cfg_.device);
    std::vector<card> all(world);
    boot_->all_gather(&mine, all.data(), sizeof(card));
    for (int r = 0; r < world; ++r) {
      const card& c = all[r];
      if (c.total != mine.total || c.workers != mine.workers || c.max_depth != mine.max_depth ||
          c.slot_bytes != mine.slot_bytes || c.ll_slot_bytes != mine.ll_slot_bytes)
        detail::throw_invalid("communicator",
                              "rank " + std::to_string(r) + " configured a different team_config");
      if (c.ce_chunk_bytes != mine.ce_chunk_bytes) // it cuts the copy-engine all-reduce's rounds
        detail::throw_invalid("communicator",
                              "rank " + std::to_string(r) + " configured a different ce_chunk_bytes");
      const tuning &a = c.tune, &b = mine.tune;
      const char* differs = a.ll_max_bytes != b.ll_max_bytes                 ? "tuning.ll_max_bytes"
                            : a.one_shot_max_bytes != b.one_shot_max_bytes   ? "tuning.one_shot_max_bytes"
                            : a.direct_max_world != b.direct_max_world       ? "tuning.direct_max_world"
                            : a.bytes_per_worker != b.bytes_per_worker       ? "tuning.bytes_per_worker"
                            : a.ll_bytes_per_worker != b.ll_bytes_per_worker ? "tuning.ll_bytes_per_worker"
                            : a.threads != b.threads                         ? "tuning.threads"
                            : c.early_launch != mine.early_launch            ? "early_launch"
                            : c.engine != mine.engine                        ? "engine"
                                                                             : nullptr;
      if (differs)
        detail::throw_invalid("communicator",
                              "rank " + std::to_string(r) + " configured a different " + differs);
      team_.base[r] =
          r == rank ? region_.ptr : static_cast<std::byte*>(P::import_handle(c.handle, cfg_.device));
    }
    if constexpr (shares_processors) {
      std::vector<gpu_placement> where(world);
      for (int r = 0; r < world; ++r) where[r] = all[r].where;
      block_cap_ =
          detail::shared_gpu_block_cap(where.data(), world, cfg_.early_launch ? 2 : 1, graphs ? 1 : 0);
      queue_share_ = detail::tightest_context(where.data(), world);
    }
    if constexpr (detail::graph_service<P>::available) {
      if (graphs) {
        if constexpr (std::is_same_v<P, platform::host>)
          graphs_.start(team_);
        else
          graphs_.start(team_, cfg_.device, cfg_.stream_priority);
      }
    }
    if (team_.lay.has_staging() && !graphs) {
      auto* engine_host = static_cast<std::byte*>(control_.host_ptr) + detail::engine_offset;
      if constexpr (std::is_same_v<P, platform::host>) engine_.start(engine_host, team_.lay);
#if defined(ARK_GPU_COMPILER)
      else if constexpr (std::is_same_v<P, platform::gpu>)
        engine_.start(engine_host, team_.engine, control_host(), team_.lay, cfg_.device,
                      cfg_.stream_priority);
#endif
    }
  }

  /// Stops the engines and releases what the communicator made; the memory peers may write into
  /// (the region, the engine queues, the control block) only when `memory`.
  void release(bool memory) noexcept {
    if constexpr (!std::is_empty_v<engine_type>) engine_.stop();
    if constexpr (detail::graph_service<P>::available) graphs_.stop();
    if (memory && engine_mem_.ptr) P::release(engine_mem_);
    for (int r = 0; r < team_.world; ++r)
      if (r != team_.rank && team_.base[r]) P::close_import(team_.base[r]);
    for (const auto& w : windows_) close_window(*w);
    windows_.clear();
    if (memory && owns_region_) P::release(region_);
    if (stream_) P::destroy_stream(stream_);
    for (auto s : ce_side_)
      if (s) P::destroy_stream(s);
    if (has_order_) P::destroy_event(order_);
    if (memory) P::release_control(control_);
  }

public:
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  /// Collective: waits (bounded) for every rank to arrive before freeing memory peers write into.
  /// If a peer never arrives, the region is leaked rather than freed under a late writer.
  ~communicator() {
    bool quiet = false;
    try {
      auto* c = control_host();
      // what still runs on our streams ends first, sooner while an abort is still raised
      if constexpr (requires { graphs_.quiesce(); }) graphs_.quiesce();
      drain();
      clear_error(*c);
      P::zero(team_.lay.claim(region_.ptr), sizeof(std::uint32_t));
      P::launch(stream_, launch_shape{1, 1}, detail::barrier_work<P>{device_handle()});
      P::synchronize(stream_);
      quiet = read_error(*c).code == 0;
    } catch (...) {
    }
    release(quiet);
  }

  int rank() const { return team_.rank; }
  int world() const { return team_.world; }
  /// Bytes of symmetric scratch this rank uses (its region).
  std::size_t scratch_bytes() const { return team_.lay.total; }
  const team_view& team() const { return team_; }
  const config& configuration() const { return cfg_; }
  /// The most thread blocks one call uses, 0 for no limit beyond the call's own choice. Set when
  /// ranks share a GPU (README, "Ranks that share a GPU"): every block of every rank's call must
  /// be able to be resident at once, so the ranks on a GPU split its SMs, two calls a rank with
  /// early launch (team/residency.hpp). Automatic choices stay under it; a call or launch that
  /// asks for more workers is refused. Your own kernels that call the device-side API keep to it
  /// too (their grids are yours).
  unsigned block_cap() const { return block_cap_; }
  typename P::stream stream() const { return stream_; }
  device_comm<P> device_handle() const { return {team_, cfg_.tuning}; }

  // -- collectives --------------------------------------------------------------------------------
  /// out[i] = in[i] reduced over all ranks. In place when in == out.
  template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
  void all_reduce(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    check_elements<T>("all_reduce", count, 1);
    check_buffer("all_reduce", "send buffer", in, count);
    check_buffer("all_reduce", "recv buffer", out, count);
    check_overlap("all_reduce", in, count, out, count, in == out);
    if constexpr (std::is_same_v<B, dma::copy_engine>)
      ce_all_reduce("all_reduce", in, out, count, op, o);
    else
      run<collective::all_reduce, A, B>("all_reduce", in, out, count, 0, op, o);
  }

  /// in: world blocks of `count`; out (count elements) = block `rank` reduced over all ranks.
  /// In place when out == in + rank * count.
  template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
  void reduce_scatter(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather and "
                  "broadcast");
    check_elements<T>("reduce_scatter", count, world());
    check_buffer("reduce_scatter", "send buffer", in, count * world());
    check_buffer("reduce_scatter", "recv buffer", out, count);
    check_overlap("reduce_scatter", in, count * world(), out, count, out == in + rank() * count);
    run<collective::reduce_scatter, A, B>("reduce_scatter", in, out, count, 0, op, o);
  }

  /// out (world blocks of `count`): block r = rank r's in. In place when in == out + rank * count.
  template <class A = algo::automatic, class B = dma::automatic, element T>
  void all_gather(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    check_elements<T>("all_gather", count, world());
    check_buffer("all_gather", "send buffer", in, count);
    check_buffer("all_gather", "recv buffer", out, count * world());
    check_overlap("all_gather", in, count, out, count * world(), in == out + rank() * count);
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_gather<collective::all_gather>("all_gather", in, out, count, count * world(), rank() * count,
                                               -1, in != out + rank() * count, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::all_gather, A, B>("all_gather", in, out, count, 0, op::sum{}, o);
  }

  /// out = root's in on every rank (root's out too, unless in == out).
  template <class B = dma::automatic, element T>
  void broadcast(const T* in, T* out, std::size_t count, int root, const call_options<P>& o = {}) {
    check_elements<T>("broadcast", count, 1);
    check_root("broadcast", root);
    if (rank() == root) check_buffer("broadcast", "send buffer", in, count);
    check_buffer("broadcast", "recv buffer", out, count);
    if (rank() == root) check_overlap("broadcast", in, count, out, count, in == out);
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_gather<collective::broadcast>("broadcast", in, out, count, count, 0, root,
                                              rank() == root && in != out, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::broadcast, algo::direct, B>("broadcast", in, out, count, root, op::sum{}, o);
  }

  /// root's out = in reduced over all ranks.
  template <class B = dma::automatic, element T, class Op = op::sum>
  void reduce(const T* in, T* out, std::size_t count, int root, Op op = {}, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather and "
                  "broadcast");
    check_elements<T>("reduce", count, 1);
    check_root("reduce", root);
    check_buffer("reduce", "send buffer", in, count);
    if (rank() == root) {
      check_buffer("reduce", "recv buffer", out, count);
      check_overlap("reduce", in, count, out, count, in == out);
    }
    run<collective::reduce, algo::direct, B>("reduce", in, out, count, root, op, o);
  }

  /// Runs a custom collective: f(ctx) on every worker, ctx being a context<P, B, scope> (see
  /// examples/03). f returns false after a failure it recorded through ctx.
  template <class B = dma::thread_copy<default_depth>, class F>
  void launch(const F& f, unsigned workers = 1, const call_options<P>& o = {}) {
    static_assert(dma_backend<B>, "ark: B is not a DMA backend");
    check_usable("launch");
    if (workers < 1 || workers > team_.lay.workers)
      detail::throw_invalid("launch", "workers must be in [1, " + std::to_string(team_.lay.workers) + "]");
    check_block_cap("launch", workers);
    check_options("launch", o);
    check_backend<B>("launch");
    const stream_turn turn = join_previous(o);
    enqueue<B>(turn.s, launch_shape{workers, cfg_.tuning.threads},
               detail::custom_work<P, B, F>{with_timeout(o), f});
    mark_call(turn);
    after_launch("launch");
  }

  // -- symmetric memory ---------------------------------------------------------------------------
  /// Collective: registers `bytes` at `p` on every rank (the same size everywhere), so that peers
  /// can address it: remote(p, peer) and window(p) then work. Peers in other processes map it
  /// through IPC, which maps one allocation: the bytes must lie in one. Kept until
  /// deregister_buffer(p) or the communicator's end: the memory must outlive it.
  const window_view& register_buffer(void* p, std::size_t bytes) {
    if (!p || bytes == 0) detail::throw_invalid("register_buffer", "buffer is null or empty");
    struct card {
      typename P::ipc_handle handle;
      std::uint64_t bytes;
    };
    const card mine{P::export_handle(typename P::memory{static_cast<std::byte*>(p), bytes}), bytes};
    std::vector<card> all(world());
    boot_->all_gather(&mine, all.data(), sizeof(card));
    for (int r = 0; r < world(); ++r)
      if (all[r].bytes != bytes)
        detail::throw_invalid("register_buffer", "rank " + std::to_string(r) + " registered " +
                                                     std::to_string(all[r].bytes) + " bytes, this rank " +
                                                     std::to_string(bytes));
    auto w = std::make_unique<registration>();
    w->bytes = bytes;
    w->base[rank()] = static_cast<std::byte*>(p);
    w->serial = registrations_;
    std::exception_ptr failed;
    try {
      for (int r = 0; r < world(); ++r)
        if (r != rank()) w->base[r] = static_cast<std::byte*>(P::import_handle(all[r].handle, cfg_.device));
    } catch (...) {
      failed = std::current_exception();
    }
    // every rank registers the window, or none does: the ranks' windows stay the same
    try {
      const std::uint8_t ok = !failed;
      std::vector<std::uint8_t> oks(world());
      boot_->all_gather(&ok, oks.data(), 1);
      if (failed) std::rethrow_exception(failed);
      for (int r = 0; r < world(); ++r)
        if (!oks[r])
          throw platform_error(
              "register_buffer: rank " + std::to_string(r) +
              " could not map its peers' buffers (its error says why); nothing was registered");
    } catch (...) {
      close_window(*w);
      throw;
    }
    ++registrations_;
    windows_.push_back(std::move(w));
    return *windows_.back();
  }

  /// Collective: undoes register_buffer(p, ...) on every rank (`p` as registered), so that the
  /// buffer may be freed. No call that uses it may still run on any rank: synchronize the streams
  /// you enqueued them on first. Waits for every rank (the bootstrap's bound) before it unmaps, so
  /// that no rank frees its buffer while a peer still reaches it; views of it (register_buffer's
  /// result, window(), remote()) are invalid afterwards.
  void deregister_buffer(void* p) {
    auto it = std::find_if(windows_.begin(), windows_.end(),
                           [&](const auto& w) { return w->base[rank()] == static_cast<std::byte*>(p); });
    const std::uint64_t none = ~std::uint64_t{0}, mine = it == windows_.end() ? none : (*it)->serial;
    drain();                                 // our own calls' copies into the peers' buffers have ended
    std::vector<std::uint64_t> all(world()); // every rank's too, and which window each undoes
    boot_->all_gather(&mine, all.data(), sizeof mine);
    if (mine == none) detail::throw_invalid("deregister_buffer", "no buffer was registered at this address");
    for (int r = 0; r < world(); ++r)
      if (all[r] != mine)
        detail::throw_invalid("deregister_buffer",
                              "rank " + std::to_string(r) +
                                  (all[r] == none ? " names no registered buffer"
                                                  : " deregisters registration " + std::to_string(all[r])) +
                                  ", this rank registration " + std::to_string(mine) +
                                  ": nothing was undone");
    close_window(**it);
    windows_.erase(it);
  }

  /// The registered window containing [p, p + bytes); throws invalid_argument if there is none.
  const window_view& window(const void* p, std::size_t bytes = 1) const {
    if (const window_view* w = find_window(p, bytes)) return *w;
    detail::throw_invalid("remote", "buffer " + pointer_name(p) + " (" + std::to_string(bytes) +
                                        " bytes) is not inside a buffer registered with this communicator");
  }

  /// Where rank `peer`'s copy of the registered local address `p` lives in this address space.
  void* remote(const void* p, int peer) const {
    if (peer < 0 || peer >= world())
      detail::throw_invalid("remote", "peer " + std::to_string(peer) + " is out of range");
    const window_view& w = window(p);
    return w.base[peer] + (static_cast<const std::byte*>(p) - w.base[rank()]);
  }

  // -- errors -------------------------------------------------------------------------------------
  /// Makes every wait of this rank fail promptly (from any thread); later calls throw aborted_error.
  void abort() {
    aborted_.store(true);
    auto* c = control_host();
    std::atomic_ref<std::uint64_t>(c->abort).store(1);
  }
  bool aborted() const { return aborted_.load(); }

  /// The first failure recorded on this rank (code 0: none).
  error_record last_error() const { return read_error(*control_host()); }

  /// Waits for the stream, then throws if a call failed.
  void synchronize() {
    P::synchronize(stream_);
    const error_record e = read_error(*control_host());
    if (e.code) raise(e, rank(), "synchronize");
  }

private:
  struct boot_base {
    virtual ~boot_base() = default;
    virtual int rank() = 0;
    virtual int size() = 0;
    virtual void all_gather(const void*, void*, std::size_t) = 0;
    virtual void barrier() = 0;
  };
  template <class Boot>
  struct boot_holder final : boot_base {
    explicit boot_holder(Boot&& b) : boot(std::move(b)) {}
    int rank() override { return boot.rank(); }
    int size() override { return boot.size(); }
    void all_gather(const void* in, void* out, std::size_t n) override { boot.all_gather(in, out, n); }
    void barrier() override { boot.barrier(); }
    Boot boot;
  };

public:
  /// What collective K with algorithm A over backend B (either may be automatic) on `count`
  /// elements of T per rank will use: thread blocks, threads, the symmetric scratch its channels
  /// occupy, whether only the copy engine moves data. Throws invalid_argument for options the
  /// call would reject.
  template <collective K, class A = algo::automatic, class B = dma::automatic, element T>
  call_plan plan(std::size_t count, const call_options<P>& o = {}) const {
    const char* call = to_string(K);
    const std::size_t bytes = count * sizeof(T);
    const choice c = select(K, bytes, world(), cfg_.tuning);
    call_plan p;
    check_options(call, o);
    // blocks for `b` bytes per worker share: the caller's count, or one per tuning step; at most max_ctas
    auto blocks = [&](std::size_t b, bool ll) {
      unsigned w = o.workers ? o.workers : select_workers(b, team_.lay.workers, cfg_.tuning, ll);
      if (o.max_ctas > 0 && w > static_cast<unsigned>(o.max_ctas)) w = static_cast<unsigned>(o.max_ctas);
      if (o.workers)
        check_block_cap(call, w); // asked for: refused above the cap
      else if (block_cap_ && w > block_cap_)
        w = block_cap_;
      return w;
    };
    constexpr bool ce = std::is_same_v<B, dma::copy_engine>;
    if (ce && K == collective::all_reduce) {
      if (o.max_ctas == 0)
        detail::throw_invalid(call,
                              "max_ctas = 0: all_reduce reduces on the SMs; give it at least one block");
      check_hardware_queues(call, 1 + std::size(ce_side_));
      p.algorithm = algo::two_shot::id;
      p.backend = dma::copy_engine::id;
      p.ctas = blocks(div_up(count, static_cast<std::size_t>(world())) * sizeof(T), false);
      p.threads = cfg_.tuning.threads;
      if (world() > 1) {
        const std::size_t round = ce_round_elems<T>();
        if (round == 0)
          detail::throw_invalid(call, "the copy-engine scratch (" +
                                          std::to_string(team_.lay.ce_scratch_bytes()) +
                                          " bytes per sender) or ce_chunk_bytes is too small for one round");
        // each peer's part of our scratch: half 0 holds the even rounds' parts of the longest
        // chunk, half 1 the odd rounds'; and the flags
        const std::size_t longest = ce_longest_chunk<T>(count);
        const std::size_t halves =
            std::min(round, longest) + (longest > round ? std::min(round, longest - round) : 0);
        p.scratch_bytes = static_cast<std::size_t>(world() - 1) * halves * sizeof(T) +
                          static_cast<std::size_t>(world()) * layout::ce_flags * layout::flag_stride;
      }
      return p;
    }
    if (o.max_ctas == 0 || ce) {
      if (K != collective::all_gather && K != collective::broadcast)
        detail::throw_invalid(call, "max_ctas = 0 (copy engine only) is for all_gather and broadcast; this "
                                    "collective reduces on the SMs: give it at least one block");
      check_hardware_queues(call, 1);
      p.algorithm = algo::direct::id;
      // copies and flag writes on the stream; one warp waits for the peers' flags
      p.ctas = 1;
      p.threads = P::synchronous_launch ? 1 : 32;
      p.copy_engine_only = true;
      p.backend = dma::copy_engine::id;
      p.scratch_bytes = static_cast<std::size_t>(team_.world) * layout::ce_flags * layout::flag_stride;
      return p;
    }
    constexpr bool one_step = algo::is_one_step<A>;
    if constexpr (algo::fixed_world<A> != 0)
      if (world() != algo::fixed_world<A>)
        detail::throw_invalid(call, one_step_world_refusal(algo::fixed_world<A>, world()));
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
    const unsigned workers = blocks(bytes, ll);
    if (workers > team_.lay.workers)
      detail::throw_invalid(call, "workers " + std::to_string(workers) + " exceeds team_config.workers " +
                                      std::to_string(team_.lay.workers));
    p.ctas = workers;
    p.threads = cfg_.tuning.threads;
    if (K == collective::all_reduce && p.algorithm == algo::one_shot::id && ll) {
      // the vector width of the backend the kernel will run: a named one's own (an LL backend may
      // move 16-byte vectors), else ll_packet's
      std::size_t vec_bytes = dma::ll_packet<1>::vec_bytes;
      if constexpr (!std::is_same_v<B, dma::automatic> && !ce) vec_bytes = B::vec_bytes;
      const std::size_t most = algorithms::detail::one_step_max_elems<T>(team_.lay, p.threads, vec_bytes);
      std::size_t largest = 0;
      for (unsigned w = 0; w < workers; ++w)
        largest = std::max(largest, split({0, count}, workers, w, align_elems<T>).len);
      p.one_step = largest <= most;
      if (one_step && !p.one_step)
        detail::throw_invalid(
            call, "algo::one_step needs every worker's share to fit one LL step: " + std::to_string(largest) +
                      " elements in a share of " + std::to_string(workers) + " workers, at most " +
                      std::to_string(most) + " fit (use algo::one_shot, or more workers)");
    }
    const layout& l = team_.lay;
    p.scratch_bytes = static_cast<std::size_t>(workers) * l.world *
                      (3 * layout::flag_stride +
                       (ll ? l.ll_slots * l.ll_slot_stride + l.slots * sizeof(slot_header)
                           : l.slots * (sizeof(slot_header) + l.slot_bytes + (engine ? l.slot_bytes : 0))));
    return p;
  }

private:
  template <collective K, class A, class B, class T, class Op>
  void run(const char* call, const T* in, T* out, std::size_t count, int root, const Op& op,
           const call_options<P>& o) {
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    check_usable(call);
    const std::size_t bytes = count * sizeof(T);
    const call_plan cp = plan<K, A, B, T>(count, o);
    const launch_shape shape{cp.ctas, cfg_.tuning.threads};
    const device_comm<P> handle = with_timeout(o);
    const stream_turn turn = join_previous(o);
    // resolve an automatic choice here: each launch then runs the one algorithm it needs
    ark::with_choice<K, A, B>(select(K, bytes, world(), cfg_.tuning), [&](auto a, auto b) {
      using A1 = decltype(a);
      using B1 = decltype(b);
      check_backend<B1>(call);
      // an automatic one-shot all-reduce whose every share fits one LL step runs algo::one_step's
      // kernel: the same algorithm and protocol, without the pipelined path beside it (graph-
      // launched 0.07-0.15 us faster at 8 B-64 KB, docs/perf.md run ak). An algorithm the caller
      // names is run as named. (Not one_step_world<2>'s kernel at two ranks: launched, it took
      // 0.09 us longer than one_step's, though 0.1 us shorter inside a persistent kernel; run an.)
      if constexpr (K == collective::all_reduce && std::is_same_v<A, algo::automatic> &&
                    std::is_same_v<A1, algo::one_shot> && B1::ll) {
        if (cp.one_step) {
          enqueue<B1>(
              turn.s, shape,
              detail::collective_work<P, K, algo::one_step, B1, T, Op>{handle, in, out, count, root, op});
          return true;
        }
      }
      enqueue<B1>(turn.s, shape,
                  detail::collective_work<P, K, A1, B1, T, Op>{handle, in, out, count, root, op});
      return true;
    });
    mark_call(turn);
    after_launch(call);
  }

  // -- the copy-engine collectives (collectives/copy_engine.hpp) ----------------------------------
  /// The operations of one copy-engine call: copies enqueued on the call's stream on GPUs (done
  /// at once on the host), flag writes and waits as one-warp kernels (ce_flags_work: a flag is
  /// written only while the rank has recorded no failure).
  class ce_ops {
  public:
    /// On the call's stream, or on `side` (one of ce_side_, ordered by the caller).
    ce_ops(communicator& c, const char* call, const call_options<P>& o, typename P::stream side = {})
        : c_(c), call_(call), s_(side ? side : c.stream_of(o)), comm_(c.with_timeout(o)) {
#if defined(ARK_GPU_COMPILER)
      if constexpr (!P::synchronous_launch) {
        if (side) return; // the call's stream was checked
        namespace rt = detail::rt;
        if (rt::is_capturing(s_))
          detail::throw_invalid(call,
                                "the copy-engine path cannot be captured in a CUDA graph (its flags carry "
                                "a per-call epoch): call it eagerly");
        int device = 0;
        rt::check(rt::stream_device(s_, &device), "find the stream's device");
        rt::check(rt::set_device(device), "set device");
      }
#endif
      if (!side) preload(w_);
    }
    ce_ops(const ce_ops&) = delete;
    ce_ops& operator=(const ce_ops&) = delete;
    typename P::stream stream() const { return s_; }

    /// Loads kernel F now, before the call enqueues anything. A call holds a flag write back for
    /// the wait kernel that follows it (write below), and with lazy module loading (CUDA's
    /// default since 12.2) the first launch of a kernel waits for every kernel running in its
    /// context: a first launch in the middle of the call waited for our wait kernels, which
    /// waited for a peer that waited, in its own first launch, for the flag we held. The ranks
    /// waited until their timeout (examples/06 on 2 GPUs; two processes on one GPU; 2026-12-01).
    template <class F>
    void preload(const F& work) const {
      if constexpr (requires { P::preload(s_, work); }) P::preload(s_, work); // GPUs
    }

    /// Writes *flag = v after the steps before it. The write joins the launch of the waits that
    /// follow it on this stream (one kernel for both on GPUs, writes first). A write that a wait
    /// on another stream must follow is flushed by the caller before that wait is enqueued: the
    /// call's steps, in the order they are launched, then run to the end one at a time, which is
    /// how the host runs them (every launch there runs when it is made) and how a GPU runs
    /// streams that share a hardware queue (ce_all_reduce). The host tests so check that order.
    void write(std::uint64_t* flag, std::uint64_t v) {
      if (w_.n || w_.nw == max_world) flush();
      w_.writes[w_.nw] = flag;
      w_.written[w_.nw++] = v;
    }
    /// Waits for *flag == v (peer `peer` writes it); consecutive waits become one wait kernel.
    void wait(std::uint64_t* flag, std::uint64_t v, int peer) {
      if (w_.n && w_.value != v) flush();
      w_.value = v;
      w_.flags[w_.n] = flag;
      w_.peers[w_.n++] = peer;
    }
    void copy(void* dst, const void* src, std::size_t bytes) {
      flush();
      if (!bytes) return;
      if constexpr (P::synchronous_launch) {
        std::memcpy(dst, src, bytes);
      } else {
#if defined(ARK_GPU_COMPILER)
        detail::rt::check(detail::rt::memcpy_async(dst, src, bytes, s_), "copy");
#endif
      }
    }
    template <class F>
    void launch(launch_shape shape, const F& f) {
      flush();
      P::launch(s_, shape, f);
    }
    /// This stream's later steps start after every step of `before` so far (and of this one).
    void order_after(ce_ops& before) {
      flush();
      before.flush();
      P::order_after(s_, before.s_, c_.order_);
    }
    /// Launches the pending writes and waits: one block of one warp (a timeout or an abort is
    /// recorded; later waits of the call then give up at once, later writes are dropped). On the
    /// host the launch has run when it returns: a failure throws here, before any later copy.
    void flush() {
      static_assert(sizeof(w_) <= 4096, "a kernel's parameters: at most 4 KB on HIP and on CUDA before 12.1");
      if (!w_.n && !w_.nw) return;
      w_.team = comm_.team;
      P::launch(s_, launch_shape{1, P::synchronous_launch ? 1u : 32u}, w_);
      w_.n = w_.nw = 0;
      c_.after_launch(call_);
    }

  private:
    communicator& c_;
    const char* call_;
    typename P::stream s_;
    device_comm<P> comm_;
    detail::ce_flags_work<P> w_{};
  };

  /// A registered buffer, and which registration it was (the same on every rank: registrations
  /// are collective, and one fails on every rank or none).
  struct registration : window_view {
    std::uint64_t serial = 0;
  };

  /// `out` (out_count elements) as every rank's registered recv buffer, and where it lies (which
  /// registration, the offset in it: detail::ce_value); throws if unregistered.
  struct placed_window {
    window_view v;
    std::uint64_t place;
  };
  template <class T>
  placed_window recv_window(const char* call, T* out, std::size_t out_count) const {
    const registration* w = find_window(out, out_count * sizeof(T));
    if (!w)
      detail::throw_invalid(call,
                            "the copy-engine path writes straight into the peers' recv buffers: register "
                            "the recv buffer first (register_buffer)");
    placed_window p{*w, 0};
    const std::size_t shift = reinterpret_cast<const std::byte*>(out) - w->base[rank()];
    for (int r = 0; r < world(); ++r) p.v.base[r] += shift;
    p.place = w->serial << 48 ^ shift;
    return p;
  }

  /// All-gather (root < 0) or broadcast from root: our `count` elements land at element `offset`
  /// of every receiver's registered `out` (out_count elements).
  template <collective K, class T>
  void ce_gather(const char* call, const T* in, T* out, std::size_t count, std::size_t out_count,
                 std::size_t offset, int root, bool local_copy, const call_options<P>& o) {
    check_usable(call);
    (void)plan<K, algo::direct, dma::copy_engine, T>(count, o);
    if (!count) return;
    const placed_window pw = recv_window(call, out, out_count);
    const window_view& w = pw.v;
    const std::uint64_t place = pw.place;
    const call_desc d = call_desc::make(K, algo::direct::id, static_cast<std::uint8_t>(dtype_of<T>),
                                        op_id<op::sum>, dma::copy_engine::id, 0, root < 0 ? 0 : root, count);
    const int me = rank();
    const layout& l = team_.lay;
    std::byte* local = team_.base[me];
    auto sends_to = [&](int p) { return p != me && (root < 0 || me == root); };
    auto receives_from = [&](int p) { return p != me && (root < 0 || p == root); };
    const std::size_t block = count * sizeof(T);
    const stream_turn turn = join_previous(o);
    ce_ops ops(*this, call, o);
    const std::uint64_t v = detail::ce_value(++ce_epoch_, d, place);
    for (int p = 0; p < world(); ++p)
      if (receives_from(p)) ops.write(l.ce_flag(team_.base[p], me, layout::ce_ready), v);
    for (int p = 0; p < world(); ++p) {
      if (!sends_to(p)) continue;
      ops.wait(l.ce_flag(local, p, layout::ce_ready), v, p);
      ops.copy(w.base[p] + offset * sizeof(T), in, block);
      ops.write(l.ce_flag(team_.base[p], me, layout::ce_sent), v);
    }
    if (local_copy) ops.copy(w.base[me] + offset * sizeof(T), in, block);
    for (int p = 0; p < world(); ++p)
      if (receives_from(p)) ops.wait(l.ce_flag(local, p, layout::ce_sent), v, p);
    ops.flush();
    mark_call(turn);
    after_launch(call);
  }

  /// Elements of T one round of the copy-engine all-reduce moves per sender: half the sender's
  /// scratch part, at most config::ce_chunk_bytes, on vector boundaries (0: too small for one).
  template <class T>
  std::size_t ce_round_elems() const {
    return std::min<std::size_t>(team_.lay.ce_scratch_bytes() / 2, cfg_.ce_chunk_bytes) / sizeof(T) /
           align_elems<T> * align_elems<T>;
  }
  /// The longest rank's chunk of `count` elements (the all-reduce's rounds follow it).
  template <class T>
  std::size_t ce_longest_chunk(std::size_t count) const {
    std::size_t longest = 0;
    for (int r = 0; r < world(); ++r)
      longest = std::max(longest, split({0, count}, world(), r, align_elems<T>).len);
    return longest;
  }

  /// All-reduce: bytes on the copy engine, the reductions by short kernels, in pipelined rounds
  /// on three streams (collectives/copy_engine.hpp): while round k's chunks travel to the peers,
  /// round k - 1 is reduced and round k - 2's result copied out.
  template <class T, class Op>
  void ce_all_reduce(const char* call, const T* in, T* out, std::size_t count, const Op& op,
                     const call_options<P>& o) {
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    check_usable(call);
    const call_plan plan_ = plan<collective::all_reduce, algo::two_shot, dma::copy_engine, T>(count, o);
    if (!count) return;
    const placed_window pw = recv_window(call, out, count);
    const window_view& w = pw.v;
    const std::uint64_t place = pw.place;
    const int W = world(), me = rank();
    const layout& l = team_.lay;
    std::byte* local = team_.base[me];
    const call_desc d =
        call_desc::make(collective::all_reduce, algo::two_shot::id, static_cast<std::uint8_t>(dtype_of<T>),
                        op_id<Op>, dma::copy_engine::id, 0, 0, count);
    const stream_turn turn = join_previous(o);
    ce_ops main(*this, call, o);
    main.preload(detail::ce_reduce_work<T, Op>{in, out, {}, W, me, 0, op});
    const launch_shape shape{plan_.ctas, plan_.threads};
    if (W == 1) {
      if (in != out) main.copy(out, in, count * sizeof(T));
      if constexpr (finalizing_op<Op, T>)
        main.launch(shape, detail::ce_reduce_work<T, Op>{in, out, {}, 1, 0, count, op});
      mark_call(turn);
      return after_launch(call);
    }
    const std::size_t round_elems = ce_round_elems<T>(); // > 0: plan checked it
    const std::size_t rounds = div_up(ce_longest_chunk<T>(count), round_elems);
    // round k: part k of chunk r (rank r reduces chunk r), or nothing once the chunk is done
    auto part = [&](int r, std::size_t k) {
      const elem_range c = split({0, count}, W, r, align_elems<T>);
      const std::size_t b = std::min(c.len, k * round_elems);
      return elem_range{c.begin + b, std::min(round_elems, c.len - b)};
    };
    const std::uint64_t epoch = ce_epoch_;
    ce_epoch_ += rounds;
    auto value = [&](std::size_t k) { return detail::ce_value(epoch + 1 + k, d, place); };
    for (auto s : ce_side_) P::order_after(s, main.stream(), order_);
    ce_ops push(*this, call, o, ce_side_[0]), fold(*this, call, o, ce_side_[1]),
        gather(*this, call, o, ce_side_[2]);
    // Every flag write is launched before any later wait of ours, whatever stream either is on:
    // the order we enqueue in is then one that runs to the end one step at a time. Streams that
    // share a hardware queue (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; Megatron-LM sets 1)
    // run their work in the order it was enqueued, and a step that waits for a spinning wait on
    // its stream holds up the queue's later steps: a write enqueued after a wait that needs the
    // peers' writes, which wait for ours, would never run.
    // The flags of round k sit in half k % 2; both halves of our scratch are free (the previous
    // call's reductions ended before it did).
    for (std::size_t k = 0; k < 2 && k < rounds; ++k)
      for (int q = 0; q < W; ++q)
        if (q != me) fold.write(l.ce_flag(team_.base[q], me, layout::ce_ready + k), value(k));
    fold.flush();
    for (std::size_t k = 0; k < rounds; ++k) {
      const unsigned h = static_cast<unsigned>(k % 2);
      const std::uint64_t v = value(k);
      // push: our part of each peer's chunk into half h of its scratch once that half is free
      for (int q = 0; q < W; ++q) {
        if (q == me) continue;
        push.wait(l.ce_flag(local, q, layout::ce_ready + h), v, q);
        const elem_range pq = part(q, k);
        push.copy(l.ce_scratch(team_.base[q], me, h), in + pq.begin, pq.len * sizeof(T));
        push.write(l.ce_flag(team_.base[q], me, layout::ce_sent + h), v);
      }
      push.flush(); // the last peer's `sent`, before the fold's wait below
      // fold: once every peer's part of our chunk landed (one warp waits), reduce it; free the
      // half for round k + 2
      for (int q = 0; q < W; ++q)
        if (q != me) fold.wait(l.ce_flag(local, q, layout::ce_sent + h), v, q);
      const elem_range mine = part(me, k);
      if (mine.len) {
        detail::ce_reduce_work<T, Op> work{in + mine.begin, out + mine.begin, {}, W, me, mine.len, op};
        for (int r = 0; r < W; ++r) work.scratch[r] = reinterpret_cast<const T*>(l.ce_scratch(local, r, h));
        fold.launch(shape, work);
        gather.order_after(fold); // before the writes below: they join the next round's waits
      }
      for (int q = 0; q < W; ++q)
        if (q != me && k + 2 < rounds)
          fold.write(l.ce_flag(team_.base[q], me, layout::ce_ready + h), value(k + 2));
      fold.flush(); // `ready` for round k + 2, before the push's wait of that round
      // gather: our result into every peer's recv buffer, once reduced
      if (!mine.len) continue;
      for (int q = 0; q < W; ++q)
        if (q != me) gather.copy(w.base[q] + mine.begin * sizeof(T), out + mine.begin, mine.len * sizeof(T));
    }
    // our results landed in every peer (copies run in order on a stream, the flag after them),
    // and every peer's in ours. After our last reduction even when we gathered nothing (an
    // empty chunk): `done` may be written only once the peers passed their previous call's wait
    // for it, which our first reduction's wait for their `sent` implies
    gather.order_after(fold);
    const std::uint64_t last = value(rounds - 1);
    for (int q = 0; q < W; ++q)
      if (q != me) gather.write(l.ce_flag(team_.base[q], me, layout::ce_done), last);
    for (int q = 0; q < W; ++q)
      if (q != me) gather.wait(l.ce_flag(local, q, layout::ce_done), last, q);
    push.flush();
    fold.flush();
    gather.flush();
    for (auto s : ce_side_) P::order_after(main.stream(), s, order_);
    mark_call(turn);
    after_launch(call);
  }

  /// Waits for what runs on the communicator's own streams.
  void drain() {
    P::synchronize(stream_);
    for (auto s : ce_side_)
      if (s) P::synchronize(s);
  }

  /// Unmaps the peers' parts of a registered window (those mapped so far).
  void close_window(const window_view& w) noexcept {
    for (int r = 0; r < team_.world; ++r)
      if (r != team_.rank && w.base[r]) P::close_import(w.base[r]);
  }

  const registration* find_window(const void* p, std::size_t bytes) const {
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& w : windows_)
      if (b >= w->base[rank()] && b + bytes <= w->base[rank()] + w->bytes) return w.get();
    return nullptr;
  }

  template <class B>
  void check_backend(const char* call) const {
    if (B::depth > team_.lay.max_depth())
      detail::throw_invalid(call, "pipeline depth " + std::to_string(B::depth) +
                                      " exceeds team_config.max_depth " +
                                      std::to_string(team_.lay.max_depth()));
    if (!B::direct && !team_.lay.has_staging())
      detail::throw_invalid(call, "this DMA backend needs staging (team_config.staging = true)");
  }

  /// Launches a call's kernel on s, with the device-graph launcher beside it when that serves
  /// the call's backend.
  template <class B, class W>
  void enqueue(typename P::stream s, launch_shape shape, const W& work) {
    if constexpr (detail::graph_service<P>::available && detail::is_proxy_engine<B> &&
                  !std::is_same_v<P, platform::host>) { // the host model's launcher is a thread
      if (team_.engine_server == engine_path::device_graphs) {
        graphs_.check_capturable(s);
        P::preload(s, work); // before the launcher spins: a lazy load would wait for it
        graphs_.mark(s);
        P::launch(s, shape, work);
        graphs_.serve(s);
        return;
      }
    }
    shape.early = cfg_.early_launch;
    P::launch(s, shape, work);
  }

  /// The handle of a call the communicator enqueues (a device-graph launcher runs beside it).
  device_comm<P> with_timeout(const call_options<P>& o) const {
    device_comm<P> d = device_handle();
    d.team.launcher_beside = team_.engine_server == engine_path::device_graphs;
    if (o.timeout.count() > 0) d.team.timeout_ns = device_span(o.timeout);
    return d;
  }
  /// A bound as the device's now_ns() counts it; one past what nanoseconds hold (milliseconds::max())
  /// saturates, never wraps.
  template <class Rep, class Period>
  std::uint64_t device_span(std::chrono::duration<Rep, Period> t) const {
    using namespace std::chrono;
    const std::uint64_t ns = t.count() <= 0 ? 0
                             : t >= duration_cast<duration<Rep, Period>>(nanoseconds::max())
                                 ? UINT64_MAX
                                 : duration_cast<nanoseconds>(t).count();
    if constexpr (requires { P::device_span_ns(ns, 0); })
      return P::device_span_ns(ns, cfg_.device);
    else
      return ns;
  }
  typename P::stream stream_of(const call_options<P>& o) const { return o.stream ? o.stream : stream_; }

  /// Calls of one communicator run one after the other, as NCCL's do: they share its workers'
  /// steps and its scratch, so two calls running at once on two streams would mix their data. A
  /// call on another stream than the previous call's waits for that call (an event: no host
  /// wait). The event is recorded after a call on a stream of yours at once (the stream may be
  /// gone by the next call), after one on the communicator's own stream only once a later call
  /// comes on another. Streams being captured are left alone: a graph's launches are ordered by
  /// the stream they are launched on. Calls that stay on the communicator's stream ask nothing
  /// of the runtime: whether it is being captured matters only once a call comes on another.
  struct stream_turn {
    typename P::stream s;
    bool captured; // asked only of a stream of yours, or where a join is due
  };
  stream_turn join_previous(const call_options<P>& o) {
    stream_turn t{stream_of(o), false};
    if constexpr (!P::synchronous_launch) {
      const bool join = prev_.recorded && t.s != prev_.s;
      if (join || t.s != stream_) t.captured = P::capturing(t.s);
      if (join && !t.captured) {
        if (prev_.s == stream_) {
          if (P::capturing(stream_)) return t; // its last call is in a graph, not on the stream
          P::record(order_, stream_);
        }
        P::wait_for(t.s, order_);
      }
    }
    return t;
  }
  void mark_call(const stream_turn& t) {
    if constexpr (!P::synchronous_launch) {
      prev_ = {t.s, !t.captured};
      if (prev_.recorded && t.s != stream_) P::record(order_, t.s);
    }
  }

  control_block* control_host() const { return static_cast<control_block*>(control_.host_ptr); }

  void check_usable(const char* call) const {
    if (aborted_.load()) throw aborted_error(std::string(call) + ": the communicator was aborted");
    const error_record e = read_error(*control_host());
    if (e.code)
      throw error(static_cast<errc>(e.code), std::string(call) +
                                                 ": communicator unusable after an earlier failure (" +
                                                 describe(e, rank()) + "); destroy it");
  }

  void after_launch(const char* call) {
    if constexpr (P::synchronous_launch) {
      const error_record e = read_error(*control_host());
      if (e.code) raise(e, rank(), call);
    }
  }

  template <class T>
  void check_elements(const char* call, std::size_t count, int blocks) const {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T) / static_cast<std::size_t>(blocks) / 2)
      detail::throw_invalid(call, "count " + std::to_string(count) + " is too large");
  }

  static std::string pointer_name(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
  }

  template <class T>
  static void check_buffer(const char* call, const char* name, const T* p, std::size_t count) {
    if (count && !p)
      detail::throw_invalid(call, std::string(name) + " is null but count is " + std::to_string(count));
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T))
      detail::throw_invalid(call, std::string(name) + " " + pointer_name(p) +
                                      " is not aligned to its element type (" + std::to_string(alignof(T)) +
                                      " bytes)");
  }

  /// Partially overlapping buffers are an error; `in_place` is the one overlap allowed.
  template <class T>
  static void check_overlap(const char* call, const T* in, std::size_t nin, const T* out, std::size_t nout,
                            bool in_place) {
    if (in_place || !in || !out || !nin || !nout) return;
    if (in < out + nout && out < in + nin)
      detail::throw_invalid(call, "send and recv buffers overlap without being in place");
  }

  /// A call or launch that asks for more workers than the ranks sharing a GPU may each hold.
  void check_block_cap(const char* call, unsigned workers) const {
    if (block_cap_ && workers > block_cap_)
      detail::throw_invalid(call, "workers " + std::to_string(workers) + " is more than the " +
                                      std::to_string(block_cap_) +
                                      " blocks a call may use while ranks share a GPU (every block of "
                                      "every rank's call must be resident at once: block_cap())");
  }

  /// The copy-engine collectives wait on streams (a warp spins until the peers' flags arrive) and
  /// put copies behind those waits. Streams that share a hardware queue run their steps in the
  /// order they were enqueued, so where ranks share a context (one process, one GPU) a rank's
  /// copy behind its wait can hold up the peer's step that the wait needs: every stream of every
  /// such rank needs a queue of its own (docs/perf.md, runs br and bs: four ranks on one H200
  /// timed out in 10 of 10 runs with CUDA's 8 queues, passed with 16 and 32).
  /// The queues are those each rank's placement reported when it was built (the runtime reads
  /// them once, when it starts), so every rank refuses the same calls.
  /// The options every call shares, refused as they are, never corrected: a negative timeout, an
  /// SM budget below -1 or below the workers asked for, a stream on another GPU than this rank's
  /// (its kernels would run there, on memory of this GPU).
  void check_options(const char* call, const call_options<P>& o) const {
    if (o.timeout.count() < 0)
      detail::throw_invalid(call, "timeout must be 0 (the communicator's) or positive");
    if (o.max_ctas < -1) detail::throw_invalid(call, "max_ctas must be -1 (no limit), 0 or positive");
    if (o.workers && o.max_ctas > 0 && o.workers > static_cast<unsigned>(o.max_ctas))
      detail::throw_invalid(call, "workers " + std::to_string(o.workers) + " exceeds max_ctas " +
                                      std::to_string(o.max_ctas));
    if constexpr (requires { P::stream_device(o.stream); }) {
      if (o.stream && o.stream != stream_) {
        const int d = P::stream_device(o.stream); // -1 while it is being captured: CUDA checks then
        if (d >= 0 && d != cfg_.device)
          detail::throw_invalid(call, "the stream is on GPU " + std::to_string(d) + ", this rank's GPU is " +
                                          std::to_string(cfg_.device));
      }
    }
  }

  void check_hardware_queues(const char* call, std::size_t streams) const {
    if constexpr (requires { P::hardware_queues_variable; }) {
      const detail::queue_share& t = queue_share_;
      if (streams > t.per_rank)
        detail::throw_invalid(call, std::to_string(t.ranks) + " ranks share a GPU in one process with " +
                                        std::to_string(t.queues) +
                                        " hardware queues, and the copy engine's " + std::to_string(streams) +
                                        " stream(s) per rank need " + std::to_string(streams * t.ranks) +
                                        ": set " + std::string(P::hardware_queues_variable) +
                                        " (32 at most) before the GPU runtime starts");
    } else {
      (void)call, (void)streams;
    }
  }

  void check_root(const char* call, int root) const {
    if (root < 0 || root >= world())
      detail::throw_invalid(call, "root " + std::to_string(root) + " is outside [0, " +
                                      std::to_string(world()) + ")");
  }

  /// Platforms whose ranks may share a processor report where each runs (device concept, item 7).
  static constexpr bool shares_processors = requires { P::placement(0); };

  config cfg_;
  std::unique_ptr<boot_base> boot_;
  unsigned block_cap_ = 0;            ///< block_cap(): 0 unless ranks share a GPU
  detail::queue_share queue_share_{}; ///< the tightest context's hardware queues per rank
  team_view team_{};
  typename P::memory region_{};
  bool owns_region_ = true;
  typename P::control_memory control_{};
  typename P::stream stream_{};
  std::vector<std::unique_ptr<registration>> windows_;
  std::uint64_t registrations_ = 0;
  std::atomic<bool> aborted_{false}; // abort() may come from any thread
  std::uint64_t ce_epoch_ = 0;       ///< copy-engine rounds made (GPU path)
  /// The copy-engine all-reduce's streams (push to the peers, reduce, gather to the peers), made
  /// with the communicator; each call orders them after the call's stream and that after them.
  typename P::stream ce_side_[3]{};
  typename P::event order_{}; // orders the copy-engine streams (made with them: none per call)
  struct {
    typename P::stream s{};
    bool recorded = false; // order_ holds the call's end, or will (its stream is ours)
  } prev_;                 ///< the previous call's stream (join_previous)
  bool has_order_ = false;
  using engine_type = typename detail::engine_service<P>::type;
  [[no_unique_address]] engine_type engine_;
  typename P::memory engine_mem_{}; ///< the engine queues, when device graphs serve them
  [[no_unique_address]] typename detail::graph_service<P>::type graphs_;
};

} // namespace ark
