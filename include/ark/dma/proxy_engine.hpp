// ark/dma/proxy_engine.hpp: ARK's GPU-controlled DMA engine, driven through a request queue.
//
// The threads of a worker never move payload themselves: thread 0 posts requests (copy these
// bytes there, then raise that flag) into a fixed-size queue in the rank's control memory and
// returns at once; a proxy thread of the rank drains every worker's queue in order. Completion
// reaches the receiver through the flag raised after the copy, and reaches the sender through the
// queue's `completed` counter. At most Depth requests of a worker are in flight: a post waits
// (bounded) for the engine to catch up.
//
// Who drains the queues depends on the platform: on the host, `host_proxy` copies with memcpy
// (the software model and our test substrate); on GPUs, `gpu_proxy` (dma/gpu_proxy.hpp) issues
// the copies to the GPU's copy engines, so the SMs only post requests; on CUDA with
// engine_path::device_graphs, `graph_engine` (dma/graph_engine.hpp) does it with no CPU at all.
#pragma once

#include "ark/dma/engine_queue.hpp"
#include "ark/dma/simple_channel.hpp"
#include "ark/platform/host.hpp"

#include <atomic>
#include <cstring>
#include <thread>

namespace ark::dma {

template <unsigned Depth>
struct proxy_engine : simple_channel<proxy_engine<Depth>> {
  static_assert(Depth >= 1, "pipeline depth must be at least 1");
  using dma_concept = backend_tag;
  static constexpr unsigned depth = Depth;
  static constexpr bool direct = false;
  static constexpr std::uint8_t id = 3;

  /// One thread: queues "copy `bytes` from src to dst, then set *flag = value" (either part may be
  /// empty). False if the queue stayed full past the timeout.
  template <class Ctx>
  ARK_HD static bool post(const Ctx& ctx, void* dst, const void* src, std::size_t bytes, std::uint64_t* flag,
                          std::uint64_t value, std::uint64_t kind = request_copy) {
    using P = typename Ctx::platform;
    engine_queue* q = queue(ctx.lay(), ctx.team.engine, ctx.worker);
    const std::uint64_t n = P::load_relaxed(&q->posted);
    // request_end takes no credit: posts keep at most Depth requests uncompleted, and the queue
    // holds more than Depth + 1, so its entry is free; it must reach the launcher even after a
    // failed wait, or the launcher would wait out its timeout
    if (kind == request_copy && n + 1 > Depth &&
        !ctx.wait_geq(&q->completed, n + 1 - Depth, wait_kind::engine, ctx.rank()))
      return false;
    engine_request& r = requests(ctx.lay(), ctx.team.engine, ctx.worker)[n % queue_capacity(ctx.lay())];
    r.dst = reinterpret_cast<std::uint64_t>(dst);
    r.src = reinterpret_cast<std::uint64_t>(src);
    r.bytes = bytes;
    r.flag = reinterpret_cast<std::uint64_t>(flag);
    r.value = value;
    r.kind = kind;
    P::store_release(&q->posted, n + 1);
    return true;
  }

  template <class Ctx>
  ARK_HD static bool put(const Ctx& ctx, void* dst, const void* src, std::size_t bytes) {
    const bool ok = ctx.g.thread_rank() != 0 || post(ctx, dst, src, bytes, nullptr, 0);
    return !ctx.g.sync_any(!ok);
  }

  template <class Ctx>
  ARK_HD static void signal(const Ctx& ctx, std::uint64_t* flag, std::uint64_t value) {
    if (ctx.g.thread_rank() == 0) post(ctx, nullptr, nullptr, 0, flag, value);
  }

  template <class Ctx>
  ARK_HD static bool wait(const Ctx& ctx, const std::uint64_t* flag, std::uint64_t value, wait_kind kind,
                          int peer) {
    return wait_flag(ctx, flag, value, kind, peer);
  }

  /// Whether a call made with this team view will be served. Device graphs serve only calls the
  /// communicator enqueues (a launcher runs beside each): a collective called from inside the
  /// user's own kernel needs engine_path::proxy.
  ARK_HD static bool served(const team_view& t) { return !graphs_serve(t) || launcher_runs(t); }

  /// Device graphs copy staging slots alone: their copies are made before any call.
  template <class Ctx>
  ARK_HD static bool copies_only_slots(const Ctx& ctx) {
    return graphs_serve(ctx.team);
  }

  /// Scope-collective, at the end of each call of the worker (device_comm::run, custom calls):
  /// tells a device-graph launcher, which serves one call, that this worker is done posting.
  /// After a failure (the rank's record claimed), waits until a CPU proxy completed every request
  /// the worker posted: a call that failed returns before its flush, and its requests still in
  /// flight would read the caller's buffers, and write into the peers' regions, after it returned
  /// (after a teardown freed them). Bounded by the timeout and ended by an abort, but not by the
  /// failure, which ends every other wait (context::keep_waiting). A device-graph launcher needs
  /// none of it: the call's stream waits for it, and it drains a failed rank's requests itself.
  template <class Ctx>
  ARK_HD static void finish(const Ctx& ctx) {
    using P = typename Ctx::platform;
    ctx.g.sync();
    if (ctx.g.thread_rank() != 0) return;
    if (graphs_serve(ctx.team)) {
      post(ctx, nullptr, nullptr, 0, nullptr, ctx.workers, request_end);
    } else if (ctx.failed_here()) {
      const engine_queue* q = queue(ctx.lay(), ctx.team.engine, ctx.worker);
      const std::uint64_t posted = P::load_relaxed(&q->posted), t0 = P::now_ns();
      for (unsigned spins = 0; P::load_acquire(&q->completed) < posted; ++spins) {
        P::pause(spins);
        if ((spins & 63u) == 63u && (P::now_ns() - t0 > ctx.team.timeout_ns || ctx.aborted())) break;
      }
    }
  }

  /// Waits until the engine has completed every request this worker posted.
  template <class Ctx>
  ARK_HD static bool flush(const Ctx& ctx) {
    using P = typename Ctx::platform;
    bool ok = true;
    if (ctx.g.thread_rank() == 0) {
      engine_queue* q = queue(ctx.lay(), ctx.team.engine, ctx.worker);
      ok = ctx.wait_geq(&q->completed, P::load_relaxed(&q->posted), wait_kind::engine, ctx.rank());
    }
    return !ctx.g.sync_any(!ok);
  }
};

/// The engine of one host rank: a thread draining the request queues of all its workers with memcpy.
class host_proxy {
public:
  /// Streams it holds: none (the host platform copies on the proxy thread).
  std::size_t streams() const { return 0; }
  host_proxy() = default;
  host_proxy(const host_proxy&) = delete;
  host_proxy& operator=(const host_proxy&) = delete;
  ~host_proxy() { stop(); }

  /// `engine`: the rank's engine memory (dma::engine_bytes()).
  void start(std::byte* engine, const layout& lay) {
    stop();
    stop_.store(false);
    thread_ = std::thread([this, engine, lay] { run(engine, lay); });
  }
  /// As gpu_proxy starts: the engine memory as the host and the workers address it (the same
  /// here); a copy here cannot fail, so the control block is not needed; it makes no stream.
  void start(std::byte* engine_host, std::byte*, control_block*, const layout& lay, int, int, bool = false) {
    start(engine_host, lay);
  }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  /// Requests executed so far (all workers).
  std::uint64_t executed() const { return executed_.load(); }

private:
  using P = platform::host;

  void run(std::byte* engine, layout lay) {
    unsigned idle = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      bool worked = false;
      for (unsigned w = 0; w < lay.all_workers(); ++w) {
        engine_queue* q = queue(lay, engine, w);
        std::uint64_t done = P::load_relaxed(&q->completed);
        const std::uint64_t posted = P::load_acquire(&q->posted);
        for (; done < posted; ++done) {
          const engine_request& r = requests(lay, engine, w)[done % queue_capacity(lay)];
          if (r.dst && r.bytes)
            std::memcpy(reinterpret_cast<void*>(r.dst), reinterpret_cast<const void*>(r.src), r.bytes);
          if (r.flag) P::store_release(reinterpret_cast<std::uint64_t*>(r.flag), r.value);
          P::store_release(&q->completed, done + 1);
          executed_.fetch_add(1, std::memory_order_relaxed);
          worked = true;
        }
      }
      idle = worked ? 0 : idle + 1;
      if (!worked) P::pause(idle);
    }
  }

  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<std::uint64_t> executed_{0};
};

} // namespace ark::dma
