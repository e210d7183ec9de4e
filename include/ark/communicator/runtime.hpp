// ark/communicator/runtime.hpp: what one rank's communicator stands on, shared by its facade and
// its engines: the bootstrap, the symmetric region and the peers' mappings of theirs (the team
// handle), the control block (error records, abort), the communicator's stream and the event
// that orders its calls, and how a call is joined to the previous one and checked afterwards.
//
// Built collectively: every rank checks its configuration, allocates, and exchanges where its
// region lives and what makes its calls' choices, refusing a peer that configured differently.
#pragma once

#include "ark/bootstrap/any.hpp"
#include "ark/collectives/device_comm.hpp"
#include "ark/communicator/errors.hpp"
#include "ark/communicator/options.hpp"
#include "ark/dma/engine_queue.hpp"
#include "ark/team/residency.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ark {

template <device P>
class rank_runtime {
public:
  using config = communicator_config<P>;
  using stream = typename P::stream;

  /// Collective. Checks `cfg` (invalid_argument before anything is allocated), then allocates
  /// and exchanges with the peers; what it made is released if it throws.
  template <bootstrap Boot>
  rank_runtime(Boot boot, config cfg) : cfg_(std::move(cfg)), boot_(std::move(boot)) {
    team_.rank = boot_.rank();
    team_.world = boot_.size();
    team_.lay = make_layout(team_.world, cfg_.team);
    check_config();
    team_.timeout_ns = device_span(cfg_.timeout);
    try {
      setup();
    } catch (...) {
      release(true); // no peer can write into our region yet: it is mapped only after the exchange
      throw;
    }
  }
  rank_runtime(const rank_runtime&) = delete;
  rank_runtime& operator=(const rank_runtime&) = delete;
  /// What release() was not called for is released, but not the memory peers may write into.
  ~rank_runtime() { release(false); }

  /// Releases what the runtime made (each thing once); the memory peers may write into (the
  /// region, the control block) only when `memory`: a peer that never reached the end may still.
  void release(bool memory) noexcept {
    for (int r = 0; r < team_.world; ++r)
      if (r != team_.rank && team_.base[r]) P::close_import(std::exchange(team_.base[r], nullptr));
    if (memory && owns_region_ && region_.ptr) P::release(region_);
    if (stream_) P::destroy_stream(std::exchange(stream_, stream{}));
    if (has_order_) P::destroy_event(order_), has_order_ = false;
    if (memory && control_.host_ptr) P::release_control(control_);
  }

  /// Adds the region, the control block and the stream to `r`.
  void report(memory_report& r) const {
    r.scratch = team_.lay.total;
    r.workers = team_.lay.workers;
    r.p2p_workers = team_.lay.p2p;
    r.slot_bytes = team_.lay.slot_bytes;
    r.scratch_is_users = !owns_region_;
    r.control = sizeof(control_block);
    r.streams += stream_ ? 1 : 0;
  }

  // -- identity --------------------------------------------------------------------------------
  int rank() const { return team_.rank; }
  int world() const { return team_.world; }
  const config& cfg() const { return cfg_; }
  const team_view& team() const { return team_; }
  team_view& team() { return team_; }
  const layout& lay() const { return team_.lay; }
  any_bootstrap& boot() { return boot_; }
  stream own_stream() const { return stream_; }
  typename P::event order_event() const { return order_; }
  /// block_cap(): the most blocks one call uses, 0 unless ranks share a GPU.
  unsigned block_cap() const { return block_cap_; }
  /// The tightest context's hardware queues per rank (where ranks share one).
  const detail::queue_share& queues() const { return queue_share_; }
  /// Whether ranks of the team share a context (one process, one GPU): every stream of every rank
  /// there needs a hardware queue of its own, so the communicator holds as few as it can.
  bool shares_context() const { return queue_share_.ranks > 1; }
  control_block* control_host() const { return static_cast<control_block*>(control_.host_ptr); }
  device_comm<P> device_handle() const { return {team_, cfg_.tuning}; }

  // -- errors ----------------------------------------------------------------------------------
  /// Refuses a call on a communicator that was aborted or failed before.
  void check_usable(const char* call) const {
    if (aborted_.load()) throw aborted_error(std::string(call) + ": the communicator was aborted");
    if (closed_) throw invalid_argument(std::string(call) + ": the communicator was closed");
    const error_record e = read_error(*control_host());
    if (e.code)
      throw error(static_cast<errc>(e.code), std::string(call) +
                                                 ": communicator unusable after an earlier failure (" +
                                                 describe(e, rank()) + "); destroy it");
  }
  /// After a launch: where launches are synchronous the call has run, and its failure is thrown.
  void after_launch(const char* call) const {
    if constexpr (P::synchronous_launch) {
      const error_record e = read_error(*control_host());
      if (e.code) raise(e, rank(), call);
    }
  }
  void abort() {
    aborted_.store(true);
    std::atomic_ref<std::uint64_t>(control_host()->abort).store(1);
  }
  bool aborted() const { return aborted_.load(); }
  /// communicator::close() began: every later call is refused.
  void mark_closed() { closed_ = true; }
  bool closed() const { return closed_; }
  error_record last_error() const { return read_error(*control_host()); }
  /// Waits for the communicator's stream, then throws if a call failed.
  void synchronize() {
    P::synchronize(stream_);
    const error_record e = read_error(*control_host());
    if (e.code) raise(e, rank(), "synchronize");
  }

  // -- calls -----------------------------------------------------------------------------------
  /// The handle of a call the communicator enqueues: its timeout, and whether a device-graph
  /// launcher runs beside it (one does beside each call the communicator makes).
  device_comm<P> call_handle(const call_options<P>& o) const {
    device_comm<P> d = device_handle();
    if (dma::graphs_serve(team_)) d.team.engine_mode |= dma::launcher_beside;
    if (o.timeout.count() > 0) d.team.timeout_ns = device_span(o.timeout);
    return d;
  }
  stream stream_of(const call_options<P>& o) const { return o.stream ? o.stream : stream_; }

  /// A bound as the device's now_ns() counts it; one past what nanoseconds hold
  /// (milliseconds::max()) saturates, never wraps.
  template <class Rep, class Period>
  std::uint64_t device_span(std::chrono::duration<Rep, Period> t) const {
    using namespace std::chrono;
    const std::uint64_t ns = t.count() <= 0 ? 0
                             : t >= duration_cast<duration<Rep, Period>>(nanoseconds::max())
                                 ? UINT64_MAX
                                 : duration_cast<nanoseconds>(t).count();
    if constexpr (async_device<P>)
      return P::device_span_ns(ns, cfg_.device);
    else
      return ns;
  }

  /// Calls of one communicator run one after the other, as NCCL's do: they share its workers'
  /// steps and its scratch, so two calls running at once on two streams would mix their data. A
  /// call on another stream than the previous call's waits for that call (an event: no host
  /// wait). The event is recorded after a call on a stream of yours at once (the stream may be
  /// gone by the next call), after one on the communicator's own stream only once a later call
  /// comes on another. Streams being captured are left alone: a graph's launches are ordered by
  /// the stream they are launched on. Calls that stay on the communicator's stream ask nothing
  /// of the runtime: whether it is being captured matters only once a call comes on another.
  struct turn {
    stream s;
    bool captured; // asked only of a stream of yours, or where a join is due
  };
  turn join_previous(const call_options<P>& o) {
    turn t{stream_of(o), false};
    if constexpr (async_device<P>) {
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
  std::uint64_t launches() const { return launches_; }
  void mark_call(const turn& t) {
    ++launches_;
    if constexpr (async_device<P>) {
      prev_ = {t.s, !t.captured};
      if (prev_.recorded && t.s != stream_) P::record(order_, t.s);
    }
  }

private:
  void check_config() const {
    if (cfg_.timeout.count() <= 0) detail::throw_invalid("communicator", "timeout must be positive");
    if (cfg_.ce_chunk_bytes == 0) detail::throw_invalid("communicator", "ce_chunk_bytes must be positive");
    if (cfg_.tuning.threads == 0 || cfg_.tuning.bytes_per_worker == 0 || cfg_.tuning.ll_bytes_per_worker == 0)
      detail::throw_invalid(
          "communicator",
          "tuning.threads, tuning.bytes_per_worker and tuning.ll_bytes_per_worker must be positive");
    if constexpr (async_device<P>)
      if (cfg_.tuning.threads > P::max_worker_threads)
        detail::throw_invalid("communicator", "tuning.threads is " + std::to_string(cfg_.tuning.threads) +
                                                  ", more than the " + std::to_string(P::max_worker_threads) +
                                                  " threads per block the collective kernel is built for");
    if (cfg_.engine == engine_path::device_graphs) {
      if (!P::device_graph_launch)
        detail::throw_invalid("communicator",
                              "engine_path::device_graphs needs CUDA device graph launch: compile "
                              "with nvcc -rdc=true and link with -lcudadevrt (HIP has none: use "
                              "engine_path::proxy)");
      if (!team_.lay.has_staging())
        detail::throw_invalid("communicator",
                              "engine_path::device_graphs serves dma::proxy_engine, which needs "
                              "staging (team_config.staging = true)");
    }
    if (cfg_.scratch) {
      if (cfg_.scratch_size < team_.lay.total)
        detail::throw_invalid("communicator", "user scratch of " + std::to_string(cfg_.scratch_size) +
                                                  " bytes is smaller than the " +
                                                  std::to_string(team_.lay.total) + " bytes required");
      if (reinterpret_cast<std::uintptr_t>(cfg_.scratch) % 256)
        detail::throw_invalid("communicator", "user scratch must be 256-byte aligned");
    }
  }

  /// Memory, the stream and the event, then the exchange.
  void setup() {
    if (cfg_.scratch) {
      region_.ptr = static_cast<std::byte*>(cfg_.scratch);
      region_.bytes = cfg_.scratch_size;
      owns_region_ = false;
      P::zero(region_.ptr, team_.lay.total);
    } else {
      // a rank that cannot get its region says so in the exchange below, so that every rank
      // throws the same out_of_memory instead of its peers waiting for it until the timeout
      try {
        region_ = P::allocate(team_.lay.total, cfg_.device);
      } catch (const platform_error&) { // region_ stays empty
      }
    }
    control_ = P::allocate_control(sizeof(control_block));
    team_.ctl = static_cast<control_block*>(control_.device_ptr);
    // made now, with every other stream of the communicator: once calls run, making a stream can
    // wait for the kernels on the GPU, ours among them, waiting for this rank
    stream_ = P::create_stream(cfg_.device, cfg_.stream_priority);
    order_ = P::create_event(cfg_.device);
    has_order_ = true;
    exchange();
  }

  /// Exchanges where every region lives and which GPU every rank runs on, and checks that every
  /// rank configured the same layout and what makes its calls' choices: a rank that chose another
  /// algorithm, backend or worker count than its peers would wait for them until the timeout; one
  /// that counted another block cap would refuse a call they make.
  void exchange() {
    const int world = team_.world, rank = team_.rank;
    const bool graphs = cfg_.engine == engine_path::device_graphs;
    struct card {
      typename P::ipc_handle handle;
      std::uint64_t total, workers, p2p, max_depth, slot_bytes, ll_slot_bytes, ce_chunk_bytes;
      tuning tune;
      std::uint8_t early_launch, engine;
      gpu_placement where;
      std::uint64_t free_bytes; // where the region could not be allocated: the device's free bytes
      std::int32_t device;
      std::uint8_t short_of_memory;
      std::int64_t process;
    };
    const bool no_region = !region_.ptr; // its allocation failed (setup)
    card mine{no_region ? typename P::ipc_handle{} : P::export_handle(region_),
              team_.lay.total,
              team_.lay.workers,
              team_.lay.p2p,
              team_.lay.max_depth(),
              team_.lay.slot_bytes,
              team_.lay.ll_slot_bytes,
              cfg_.ce_chunk_bytes,
              cfg_.tuning,
              static_cast<std::uint8_t>(cfg_.early_launch),
              static_cast<std::uint8_t>(cfg_.engine),
              {},
              no_region ? P::free_memory(cfg_.device) : 0,
              cfg_.device,
              static_cast<std::uint8_t>(no_region),
              static_cast<std::int64_t>(::getpid())};
    if constexpr (shared_device<P>) mine.where = P::placement(cfg_.device);
    std::vector<card> all(world);
    boot_.all_gather(&mine, all.data(), sizeof(card));
    // a platform without IPC (the host: a region is an address of the process's memory) serves
    // ranks that are threads of one process; a peer's address from another process would be
    // written through as if it were ours
    if constexpr (!async_device<P>)
      for (int r = 0; r < world; ++r)
        if (all[r].process != mine.process)
          detail::throw_invalid("communicator",
                                "rank " + std::to_string(r) +
                                    " runs in another process: the host platform's ranks are "
                                    "threads of one process (a GPU platform's may be processes)");
    for (int r = 0; r < world; ++r)
      if (all[r].short_of_memory) throw no_scratch_error(r, all[r]);
    for (int r = 0; r < world; ++r) {
      const card& c = all[r];
      if (c.total != mine.total || c.workers != mine.workers || c.p2p != mine.p2p ||
          c.max_depth != mine.max_depth || c.slot_bytes != mine.slot_bytes ||
          c.ll_slot_bytes != mine.ll_slot_bytes)
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
    if constexpr (shared_device<P>) {
      std::vector<gpu_placement> where(world);
      for (int r = 0; r < world; ++r) where[r] = all[r].where;
      // a device-graph launcher holds a block of its own for good
      block_cap_ =
          detail::shared_gpu_block_cap(where.data(), world, cfg_.early_launch ? 2 : 1, graphs ? 1 : 0);
      queue_share_ = detail::tightest_context(where.data(), world);
      // every stream of every rank that shares a context needs a hardware queue of its own: two
      // streams on one queue run their steps in the order enqueued, so a step that waits (a
      // call behind the previous one, a copy behind a flag) holds up a peer's step behind it,
      // which the wait may need. Every rank computes this from the same table: all refuse.
      const std::size_t held = detail::held_streams(team_.lay.has_staging());
      if (shares_context() && queue_share_.per_rank < held)
        detail::throw_invalid(
            "communicator",
            std::to_string(queue_share_.ranks) + " ranks share a GPU in one process, whose context has " +
                std::to_string(queue_share_.queues) + " hardware queues, and each rank holds " +
                std::to_string(held) + " streams (its own, " +
                (team_.lay.has_staging() ? "the DMA engine's, " : "") + "the helpers'): they need " +
                std::to_string(queue_share_.ranks * held) + ". Set " +
                std::string(P::hardware_queues_variable) +
                " (32 at most) before the GPU runtime starts, or run fewer ranks per process");
    }
  }

  /// The error every rank throws when rank r could not allocate its region.
  template <class Card>
  out_of_memory no_scratch_error(int r, const Card& c) const {
    const layout& l = team_.lay;
    return out_of_memory(
        "communicator: rank " + std::to_string(r) + " could not allocate its symmetric scratch of " +
            std::to_string(l.total) + " bytes on device " + std::to_string(c.device) + ", which has " +
            std::to_string(c.free_bytes) + " bytes free. The scratch holds " +
            std::to_string(l.all_workers()) + " workers x " + std::to_string(l.world) + " ranks x " +
            std::to_string(l.max_depth() + 1) + " slots of " + std::to_string(l.slot_bytes) +
            " bytes (and LL slots): lower team_config.slot_bytes, .workers, .p2p_workers or .max_depth, or "
            "with "
            "automatic slots (slot_bytes = 0) team_config.scratch_budget "
            "(communicator::required_scratch says what a configuration needs), or pass "
            "config::scratch",
        l.total, c.free_bytes);
  }

  config cfg_;
  any_bootstrap boot_;
  team_view team_{};
  typename P::memory region_{};
  bool owns_region_ = true;
  typename P::control_memory control_{};
  stream stream_{};
  typename P::event order_{}; ///< orders a communicator's calls across streams (made with it)
  bool has_order_ = false;
  struct {
    stream s{};
    bool recorded = false;           // order_ holds the call's end, or will (its stream is ours)
  } prev_;                           ///< the previous call's stream (join_previous)
  std::uint64_t launches_ = 0;       ///< calls marked (mark_call)
  std::atomic<bool> aborted_{false}; // abort() may come from any thread
  bool closed_ = false;
  unsigned block_cap_ = 0;
  detail::queue_share queue_share_{};
};

} // namespace ark
