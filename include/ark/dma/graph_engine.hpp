// ark/dma/graph_engine.hpp: the copy engine triggered by GPU threads, with no CPU on the path.
//
// Serves dma::proxy_engine's request queues when a communicator is configured with
// engine_path::device_graphs (CUDA, compiled with -rdc=true and linked with cudadevrt). The
// symmetric region is cut into fixed slots, so every copy an engine channel can ask for is known
// when the communicator starts: staging slot (w, peer, slot) of ours -> data slot (w, us, slot)
// of the peer, in up to four sizes (slot_bytes / 4^k). For each of them a CUDA graph is
// instantiated for device launch:
//
//   memcpy node (peer copy, a copy engine)  ->  1-thread kernel node "signal"
//
// and a launcher kernel (one warp, itself a device-launchable graph) runs beside each call: it
// takes the workers' requests in order and fires the matching graph, fire and forget
// (platform/cuda/graphs.hpp). Before each launch it writes the request's flag and value into the
// slot's ticket; the signal node raises that flag once the copy landed and counts the request
// completed. Launched graphs run in any order, so the signal node of a channel's k-th copy first
// waits (bounded) until the (k-1)-th landed: a receiver's head flag only grows and never runs
// ahead of its data.
//
// Limits of the mechanism: one graph execution may fire at most 120 device launches, so the
// launcher re-arms itself with a tail launch of its own graph; a device launch and a copy's
// trigger-to-flag round trip each cost microseconds (docs/perf.md), so this path is for large
// slots (MB) and for running beside compute, not for small messages. The launcher serves one
// call: each worker's last request of a call is a `request_end` (proxy_engine::finish), and the
// launcher returns once every worker of the call posted it. Not graph-capturable (the launcher
// is a device-launch graph of its own).
//
// The routing of a request to its graph (graph_route), the launcher loop (serve_call) and the
// signal step (try_signal) are plain code shared with the host model (host_graph_engine), which
// the host tests run. The GPU engine below them builds and launches its graphs through the
// platform (platform/gpu_graphs.hpp) and exists where that has device graph launch
// (ARK_HAS_DEVICE_GRAPH_LAUNCH, config.hpp).
#pragma once

#include "ark/dma/common.hpp"
#include "ark/dma/engine_queue.hpp"
#include "ark/platform/gpu_graphs.hpp"
#include "ark/platform/host.hpp"
#include "ark/team/team.hpp"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ark::dma {

/// Sizes of the pre-instantiated copies: slot_bytes / 4^k for k < graph_classes, each at least
/// 16 KB (a request takes the smallest that holds it).
ARK_HD inline unsigned graph_classes(const layout& l) {
  unsigned c = 1;
  while (c < 4 && (l.slot_bytes >> (2 * c)) >= (16u << 10) && (l.slot_bytes >> (2 * c)) % 256 == 0) ++c;
  return c;
}
ARK_HD inline std::uint64_t graph_class_bytes(const layout& l, unsigned k) { return l.slot_bytes >> (2 * k); }
/// The engine's bound: twice the calls' (a request waits behind a whole call), saturating.
inline std::uint64_t engine_timeout_ns(std::uint64_t ns) { return ns > UINT64_MAX / 2 ? UINT64_MAX : 2 * ns; }

/// The copy graph that serves a request: ticket (w, peer, slot) and size class.
struct graph_route {
  bool ok = false;
  std::uint32_t ticket = 0; ///< (w * world + peer) * slots + slot
  std::uint32_t cls = 0;
  int peer = -1;
};

/// The ticket of copy (w, peer, slot): its graphs' index before the size class.
ARK_HD inline std::uint32_t graph_ticket_of(const layout& l, unsigned w, int peer, unsigned slot) {
  return static_cast<std::uint32_t>((std::uint64_t(w) * l.world + unsigned(peer)) * l.slots + slot);
}

/// Which pre-instantiated copy serves request r of worker w: r must copy the first r.bytes of our
/// staging slot (w, peer, slot) into peer's data slot (w, us, slot). Anything else has no graph.
ARK_HD inline graph_route route_request(const team_view& t, unsigned w, const engine_request& r) {
  graph_route g;
  const layout& l = t.lay;
  const auto first = reinterpret_cast<std::uint64_t>(l.stage(t.local(), w, 0, 0));
  if (w >= l.workers || r.src < first || r.bytes == 0 || r.bytes > l.slot_bytes) return g;
  const std::uint64_t off = r.src - first;
  if (off % l.slot_bytes || off / l.slot_bytes >= std::uint64_t(l.world) * l.slots) return g;
  const int peer = static_cast<int>(off / l.slot_bytes / l.slots);
  const unsigned slot = static_cast<unsigned>(off / l.slot_bytes % l.slots);
  if (peer == t.rank || r.dst != reinterpret_cast<std::uint64_t>(l.data(t.base[peer], w, t.rank, slot)))
    return g;
  unsigned cls = graph_classes(l) - 1;
  while (graph_class_bytes(l, cls) < r.bytes) --cls;
  g.ok = true;
  g.ticket = graph_ticket_of(l, w, peer, slot);
  g.cls = cls;
  g.peer = peer;
  return g;
}

/// Where copy graph (ticket, class) copies from and to.
struct graph_copy {
  std::byte* dst;
  const std::byte* src;
  std::uint64_t bytes;
};
ARK_HD inline graph_copy graph_copy_of(const team_view& t, std::uint32_t ticket, unsigned cls) {
  const layout& l = t.lay;
  const unsigned slot = ticket % l.slots;
  const std::uint64_t chan = ticket / l.slots;
  const auto w = static_cast<unsigned>(chan / l.world);
  const int peer = static_cast<int>(chan % l.world);
  return {l.data(t.base[peer], w, t.rank, slot), l.stage(t.local(), w, peer, slot),
          graph_class_bytes(l, cls)};
}

/// What the launcher tells the signal step of a (w, peer, slot) copy before launching it.
struct graph_ticket {
  std::uint64_t* flag; ///< raise to `value` once the copy landed (null: none)
  std::uint64_t value;
  std::uint64_t seq;  ///< the copy's number on its channel (w, peer)
  std::uint64_t used; ///< launched before: seq is the last launch's
};

/// The engine's state: device memory on GPUs (passed by value to its kernels), host memory in the
/// host model.
struct graph_state {
  team_view team;
  graph_ticket* tickets;      ///< [(w * world + peer) * slots + slot]
  std::uint64_t* chan_seq;    ///< [w * world + peer]: copies launched (the launcher's)
  std::uint64_t* chan_landed; ///< [w * world + peer]: copies landed (the signal steps')
  std::uint64_t* ended;       ///< workers of the current call that posted request_end
  std::uint64_t timeout_ns;   ///< a request left unserved this long is an engine failure
  unsigned classes;
};

/// Why serve_call returned.
enum class serve_end { call_done, rearm, failed, stopped };

/// Most launches one serve_call makes before it returns `rearm` (one CUDA graph execution may
/// fire at most 120).
inline constexpr unsigned graph_launches_per_execution = 112;

/// The launcher: takes every worker's requests in order and fires the copy that serves each
/// (launch(ticket, cls) -> bool), until every worker of the call posted request_end. Bare
/// signals wait for the worker's earlier requests; a ticket is rewritten only once its previous
/// copy landed. A refused launch (the slot's graph may still be finishing its last execution:
/// a graph runs one execution at a time) is undone and retried; refused past the timeout, it is
/// a platform error. Waiting with no request pending is not a failure (the workers' own waits
/// are bounded, and each worker posts request_end however its call ended); a request that stays
/// pending and unserved past the timeout is. An abort, or keep() -> false (the host model's
/// shutdown), stops it.
/// Once the rank failed (its error record claimed) when a launcher starts, it drains: it takes
/// and completes every request but copies and signals nothing (a call behind a failed one stores
/// nothing into the peers), and returns once nothing came for the timeout. A launcher that
/// returned `failed` left its call's later requests and ends to the next one, whose count of
/// ends may then never match: without that bound it, and the stream behind it, would wait for ever.
ARK_EXEC_CHECK_DISABLE
template <class P, class Launch, class Keep>
ARK_HD serve_end serve_call(const graph_state& v, Launch&& launch, Keep&& keep) {
  const team_view& t = v.team;
  const layout& l = t.lay;
  const bool drain = P::load_relaxed(l.claim(t.local())) != 0;
  unsigned launches = 0;
  // last: when the launcher last served, or had nothing to serve; active: when it last served
  std::uint64_t last = P::now_ns(), active = last, refused_since = 0;
  auto fail = [&](errc code, unsigned w, std::uint64_t step, std::uint64_t a, std::uint64_t b) {
    record_error<P>(t, code, static_cast<std::uint32_t>(wait_kind::engine), -1, w, step, a, b);
    *v.ended = 0;
    return serve_end::failed;
  };
  for (unsigned idle = 0;; ++idle) {
    bool worked = false, pending = false;
    for (unsigned w = 0; w < l.workers; ++w) {
      engine_queue* q = queue(l, t.engine, w);
      std::uint64_t taken = q->taken;
      const std::uint64_t posted = P::load_acquire(&q->posted);
      for (; taken < posted; ++taken) {
        const engine_request r = requests(l, t.engine, w)[taken % queue_capacity(l)];
        if (r.kind == request_end) {
          P::fetch_add(&q->completed, 1);
          if (++*v.ended == r.value) { // every worker of the call is done posting
            *v.ended = 0;
            q->taken = taken + 1;
            return serve_end::call_done;
          }
        } else if (drain) {
          P::fetch_add(&q->completed, 1);
        } else if (r.dst && r.bytes) {
          const graph_route g = route_request(t, w, r);
          if (!g.ok) { // not a channel slot: no copy was instantiated for it
            q->taken = taken;
            return fail(errc::unsupported, w, taken, r.dst, r.src);
          }
          graph_ticket* tk = v.tickets + g.ticket;
          const std::uint64_t chan = g.ticket / l.slots;
          if (tk->used && P::load_acquire(&v.chan_landed[chan]) <= tk->seq) break; // not landed yet
          if (launches == graph_launches_per_execution) {
            q->taken = taken;
            return serve_end::rearm;
          }
          const graph_ticket before = *tk;
          tk->flag = reinterpret_cast<std::uint64_t*>(r.flag);
          tk->value = r.value;
          tk->seq = v.chan_seq[chan]++;
          tk->used = 1;
          P::fence();
          if (!launch(g.ticket, g.cls)) { // undo, and try again on a later sweep
            *tk = before;
            --v.chan_seq[chan];
            if (!refused_since) refused_since = P::now_ns();
            if (P::now_ns() - refused_since > v.timeout_ns) {
              q->taken = taken;
              return fail(errc::platform, w, taken, 1, 0);
            }
            break;
          }
          refused_since = 0;
          ++launches;
        } else if (r.flag) {
          if (P::load_acquire(&q->completed) < taken) break; // the worker's earlier requests first
          P::fence();
          P::store_release(reinterpret_cast<std::uint64_t*>(r.flag), r.value);
          P::fetch_add(&q->completed, 1);
        } else {
          P::fetch_add(&q->completed, 1);
        }
        worked = true;
      }
      q->taken = taken;
      pending |= taken < posted;
    }
    const std::uint64_t now = P::now_ns();
    if (worked) {
      last = active = now;
      idle = 0;
      continue;
    }
    if (!pending) last = now;
    if (now - last > v.timeout_ns) return fail(errc::timeout, 0, 0, *v.ended, 0); // requests left unserved
    if (drain && now - active > v.timeout_ns)
      return fail(errc::timeout, 0, 0, *v.ended, 1); // recorded before
    if ((idle & 1023u) == 1023u && (!keep() || (now - active > 100000 && P::load_acquire(&t.ctl->abort)))) {
      *v.ended = 0;
      return serve_end::stopped;
    }
    P::pause(idle);
  }
}

/// The signal step of copy `ticket`, once its bytes landed: raises the request's flag and counts
/// it completed, unless the channel's previous copy has not been signalled yet (false: try again).
template <class P>
ARK_HD bool try_signal(const graph_state& v, std::uint32_t ticket) {
  const layout& l = v.team.lay;
  const graph_ticket t = v.tickets[ticket];
  const std::uint64_t chan = ticket / l.slots;
  if (P::load_acquire(v.chan_landed + chan) != t.seq) return false;
  if (t.flag) {
    P::fence();
    P::store_release(t.flag, t.value);
  }
  P::store_release(v.chan_landed + chan, t.seq + 1);
  P::fetch_add(&queue(l, v.team.engine, static_cast<unsigned>(chan / l.world))->completed, 1);
  return true;
}

/// The host model of the engine (engine_path::device_graphs on the host platform): a launcher
/// thread runs serve_call; "launched copies" go to a pool whose threads take them in random
/// order, copy, then signal (in channel order, as the GPU's signal nodes do by waiting), and
/// end some time later; relaunching a graph that has not ended is refused, as CUDA does.
class host_graph_engine {
public:
  host_graph_engine() = default;
  host_graph_engine(const host_graph_engine&) = delete;
  host_graph_engine& operator=(const host_graph_engine&) = delete;
  ~host_graph_engine() { stop(); }

  /// A launcher thread serves every call, those made from the user's own code too.
  static constexpr bool serves_every_call = true;

  /// As graph_engine starts (device and priority mean nothing here).
  void start(const team_view& t, int, int) { start(t); }
  void start(const team_view& t) {
    stop();
    const layout& l = t.lay;
    const std::size_t tickets = std::size_t(l.workers) * l.world * l.slots,
                      chans = std::size_t(l.workers) * l.world;
    tickets_.assign(tickets, graph_ticket{});
    counters_.assign(2 * chans + 1, 0);
    state_ = {t,
              tickets_.data(),
              counters_.data(),
              counters_.data() + chans,
              counters_.data() + 2 * chans,
              engine_timeout_ns(t.timeout_ns),
              graph_classes(l)};
    stop_.store(false);
    launcher_ = std::thread([this] { run_launcher(); });
    for (auto& c : copiers_)
      c = std::thread([this, &c] { run_copier(static_cast<unsigned>(&c - copiers_)); });
  }

  /// Ends the launcher and the copy pool, as the GPU engine's quiesce waits for its launcher: the
  /// communicator's teardown then clears the error record that the launcher may write.
  void quiesce() { stop(); }

  void stop() {
    stop_.store(true);
    work_.notify_all();
    if (launcher_.joinable()) launcher_.join();
    for (auto& c : copiers_)
      if (c.joinable()) c.join();
    pending_.clear();
    tails_.clear();
  }

  /// Copies launched so far, launcher executions (calls served plus re-arms), and launches
  /// refused because the same graph was still running (the launcher retried them).
  std::uint64_t launches() const { return launches_.load(); }
  std::uint64_t executions() const { return executions_.load(); }
  std::uint64_t refusals() const { return refusals_.load(); }

private:
  using P = platform::host;
  struct item { // a launched copy graph, not yet signalled
    std::uint32_t ticket, cls;
    bool copied, busy;
  };
  struct tail { // a signalled graph whose execution has not ended yet
    std::uint32_t ticket, cls;
    std::uint64_t ends;
  };
  /// How long a graph's execution outlives its signal, unless a relaunch is refused first.
  static constexpr std::uint64_t graph_tail_ns = 20000000;

  void run_launcher() {
    auto launch = [this](std::uint32_t ticket, unsigned cls) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const item& p : pending_)
          if (p.ticket == ticket && p.cls == cls) return false; // cannot happen: the ticket waits
        const std::uint64_t now = P::now_ns();
        for (std::size_t i = 0; i < tails_.size(); ++i) {
          if (tails_[i].ticket != ticket || tails_[i].cls != cls) continue;
          const bool running = now < tails_[i].ends;
          tails_[i] = tails_.back(); // refused once, the execution is over by the retry
          tails_.pop_back();
          if (running) {
            refusals_.fetch_add(1);
            return false;
          }
          break;
        }
        pending_.push_back({ticket, cls, false, false});
      }
      launches_.fetch_add(1);
      work_.notify_one();
      return true;
    };
    auto keep = [this] { return !stop_.load(std::memory_order_relaxed); };
    while (!stop_.load()) {
      if (serve_call<P>(state_, launch, keep) != serve_end::stopped) executions_.fetch_add(1);
    }
  }

  void run_copier(unsigned seed) {
    std::uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
    std::vector<std::size_t> free;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_.load()) {
      free.clear();
      for (std::size_t i = 0; i < pending_.size(); ++i)
        if (!pending_[i].busy) free.push_back(i);
      if (free.empty()) {
        work_.wait_for(lock, std::chrono::microseconds(200));
        continue;
      }
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      item& it = pending_[free[x % free.size()]];
      if (!it.copied) { // the copy node: out of order
        it.busy = true;
        const item mine = it;
        lock.unlock();
        const graph_copy c = graph_copy_of(state_.team, mine.ticket, mine.cls);
        std::memcpy(c.dst, c.src, c.bytes);
        lock.lock();
        for (auto& p : pending_)
          if (p.ticket == mine.ticket && p.busy && !p.copied) p.copied = true, p.busy = false;
      } else if (try_signal<P>(state_, it.ticket)) { // the signal node: in channel order
        if (tails_.size() > 4096) tails_.erase(tails_.begin(), tails_.begin() + 2048);
        tails_.push_back({it.ticket, it.cls, P::now_ns() + graph_tail_ns});
        it = pending_.back();
        pending_.pop_back();
      } else {
        lock.unlock();
        P::pause(0);
        lock.lock();
      }
    }
  }

  graph_state state_{};
  std::vector<graph_ticket> tickets_;
  std::vector<std::uint64_t> counters_;
  std::vector<item> pending_;
  std::vector<tail> tails_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::thread launcher_, copiers_[2];
  std::atomic<bool> stop_{true};
  std::atomic<std::uint64_t> launches_{0}, executions_{0}, refusals_{0};
};

// The GPU engine: only where device code can launch graphs. This #if is on a feature macro of
// config.hpp, not on a vendor: dma::graph_engine is a type that exists or does not, and the
// communicator names it under the same macro.
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)

namespace detail {

/// The kernel node of every copy graph: one thread, after the copy landed; copies of one channel
/// land in any order, so it waits (bounded) for the channel's previous one.
template <int = 0>
__global__ void graph_signal_kernel(graph_state v, std::uint32_t ticket) {
  using P = platform::gpu;
  const std::uint64_t start = P::now_ns();
  while (!try_signal<P>(v, ticket)) {
    if (P::now_ns() - start > v.timeout_ns) {
      const std::uint64_t chan = ticket / v.team.lay.slots;
      record_error<P>(v.team, errc::timeout, static_cast<std::uint32_t>(wait_kind::engine), -1,
                      static_cast<unsigned>(chan / v.team.lay.world), v.tickets[ticket].seq,
                      v.tickets[ticket].seq, P::load_acquire(v.chan_landed + chan));
      return;
    }
  }
}

/// The launcher graph's kernel: one thread serves the call; re-arms itself with a tail launch
/// of its own graph before the limit of fire-and-forget launches per execution.
template <int = 0>
__global__ void graph_launcher_kernel(graph_state v, ark::detail::rt::graph_exec_t* graphs) {
  using P = platform::gpu;
  if (block_scope{}.thread_rank() != 0) return;
  auto launch = [&](std::uint32_t ticket, unsigned cls) {
    return ark::detail::rt::graph_launch_fire_and_forget(graphs[ticket * v.classes + cls]);
  };
  const serve_end e = serve_call<P>(v, launch, [] { return true; });
  if (e == serve_end::rearm && !ark::detail::rt::graph_tail_launch_self())
    record_error<P>(v.team, errc::platform, static_cast<std::uint32_t>(wait_kind::engine), -1, 0, 0, 2, 0);
}

} // namespace detail

/// The engine of one rank: the copy graphs, the launcher graph and the stream it runs on.
class graph_engine {
public:
  using stream = platform::gpu::stream;

  graph_engine() = default;
  graph_engine(const graph_engine&) = delete;
  graph_engine& operator=(const graph_engine&) = delete;
  ~graph_engine() { stop(); }

  /// Serves the calls the communicator enqueues (a launcher beside each), not calls made from
  /// inside the user's own kernels.
  static constexpr bool serves_every_call = false;

  /// Instantiates and uploads every copy graph (workers x peers x slots x classes) and the
  /// launcher. `t.engine` must be the rank's engine queues in device memory.
  void start(const team_view& t, int device, int priority) {
    namespace rt = ark::detail::rt;
    stop();
    device_ = device;
    rt::check(rt::set_device(device), "set device");
    const layout& l = t.lay;
    const unsigned classes = graph_classes(l);
    const std::size_t tickets = std::size_t(l.workers) * l.world * l.slots,
                      chans = std::size_t(l.workers) * l.world;
    const std::size_t bytes =
        tickets * sizeof(graph_ticket) + 2 * chans * 8 + 8 + tickets * classes * sizeof(rt::graph_exec_t);
    rt::check(rt::malloc(&mem_, bytes), "allocate graph engine state");
    platform::gpu::zero(mem_, bytes);
    auto* p = static_cast<std::byte*>(mem_);
    view_.team = t;
    view_.tickets = reinterpret_cast<graph_ticket*>(p);
    view_.chan_seq = reinterpret_cast<std::uint64_t*>(p + tickets * sizeof(graph_ticket));
    view_.chan_landed = view_.chan_seq + chans;
    view_.ended = view_.chan_landed + chans;
    graphs_ = reinterpret_cast<rt::graph_exec_t*>(view_.ended + 1);
    view_.classes = classes;
    view_.timeout_ns = engine_timeout_ns(t.timeout_ns);
    stream_ = platform::gpu::create_stream(device, priority);
    rt::check(rt::event_create_untimed(&fork_), "create event");
    rt::check(rt::event_create_untimed(&join_), "create event");

    std::vector<rt::graph_exec_t> table(tickets * classes, nullptr);
    for (unsigned w = 0; w < l.workers; ++w)
      for (int peer = 0; peer < t.world; ++peer) {
        if (peer == t.rank) continue;
        for (unsigned slot = 0; slot < l.slots; ++slot) {
          const std::uint32_t ticket = graph_ticket_of(l, w, peer, slot);
          for (unsigned k = 0; k < classes; ++k) table[ticket * classes + k] = instantiate_copy(ticket, k);
        }
      }
    platform::gpu::copy(graphs_, table.data(), table.size() * sizeof(rt::graph_exec_t));
    launcher_ = instantiate_launcher();
    rt::check(rt::stream_synchronize(stream_), "upload graphs");
  }

  /// Throws before anything is enqueued if `s` is being captured into a graph.
  static void check_capturable(stream s) {
    if (platform::gpu::capturing(s))
      ark::detail::throw_invalid("proxy_engine", "served by device graphs (engine_path::device_graphs), it "
                                                 "cannot be captured in a CUDA graph: its launcher is a "
                                                 "device-launch graph of its own");
  }

  /// Marks where on `s` the call begins (before its kernel is enqueued).
  void mark(stream s) { ark::detail::rt::check(ark::detail::rt::event_record(fork_, s), "record event"); }
  /// Once the call's kernel is enqueued on `s`: runs the launcher beside it (ordered after what
  /// preceded the call on `s`) and makes the rest of `s` wait until the launcher has served it.
  /// If enqueueing the kernel failed, no launcher was started.
  void serve(stream s) {
    namespace rt = ark::detail::rt;
    rt::check(rt::stream_wait_event(stream_, fork_), "wait event");
    rt::check(rt::graph_launch(launcher_, stream_), "launch the graph engine's launcher");
    rt::check(rt::event_record(join_, stream_), "record event");
    rt::check(rt::stream_wait_event(s, join_), "wait event");
  }

  /// Waits until no launcher runs.
  void quiesce() {
    if (!mem_) return;
    (void)ark::detail::rt::set_device(device_);
    (void)ark::detail::rt::stream_synchronize(stream_);
  }

  void stop() {
    namespace rt = ark::detail::rt;
    if (!mem_) return;
    (void)rt::set_device(device_);
    (void)rt::stream_synchronize(stream_);
    for (auto g : execs_) (void)rt::graph_exec_destroy(g);
    execs_.clear();
    if (launcher_) (void)rt::graph_exec_destroy(launcher_);
    launcher_ = nullptr;
    (void)rt::event_destroy(fork_);
    (void)rt::event_destroy(join_);
    (void)rt::stream_destroy(stream_);
    (void)rt::free(mem_);
    mem_ = nullptr;
  }

  /// Copy graphs instantiated (workers x peers x slots x size classes).
  std::size_t graphs() const { return execs_.size(); }

private:
  /// Copy graph (ticket, cls): the copy, then the signal kernel that raises its ticket's flag.
  ark::detail::rt::graph_exec_t instantiate_copy(std::uint32_t ticket, unsigned cls) {
    namespace rt = ark::detail::rt;
    const graph_copy c = graph_copy_of(view_.team, ticket, cls);
    rt::graph_t g = nullptr;
    rt::graph_node_t copy = nullptr, signal = nullptr;
    rt::check(rt::graph_create(&g), "create copy graph");
    rt::check(rt::graph_add_copy(&copy, g, c.dst, c.src, c.bytes), "add copy node");
    void* args[] = {&view_, &ticket};
    rt::check(rt::graph_add_kernel(&signal, g, &copy, &detail::graph_signal_kernel<0>, 1, args),
              "add signal node");
    rt::graph_exec_t e = nullptr;
    const rt::error_t err = rt::graph_instantiate_for_device_launch(&e, g);
    (void)rt::graph_destroy(g);
    rt::check(err, "instantiate copy graph for device launch");
    execs_.push_back(e);
    rt::check(rt::graph_upload(e, stream_), "upload copy graph");
    return e;
  }

  /// The launcher graph: one kernel node of one warp.
  ark::detail::rt::graph_exec_t instantiate_launcher() {
    namespace rt = ark::detail::rt;
    rt::graph_t g = nullptr;
    rt::graph_node_t node = nullptr;
    rt::check(rt::graph_create(&g), "create launcher graph");
    void* args[] = {&view_, &graphs_};
    rt::check(rt::graph_add_kernel(&node, g, nullptr, &detail::graph_launcher_kernel<0>, 32, args),
              "add launcher node");
    rt::graph_exec_t e = nullptr;
    const rt::error_t err = rt::graph_instantiate_for_device_launch(&e, g);
    (void)rt::graph_destroy(g);
    rt::check(err, "instantiate launcher graph for device launch");
    rt::check(rt::graph_upload(e, stream_), "upload launcher graph");
    return e;
  }

  int device_ = 0;
  void* mem_ = nullptr;
  graph_state view_{};
  ark::detail::rt::graph_exec_t* graphs_ = nullptr; ///< device memory: [ticket * classes + class]
  stream stream_ = nullptr;
  platform::gpu::event fork_ = nullptr, join_ = nullptr;
  ark::detail::rt::graph_exec_t launcher_ = nullptr;
  std::vector<ark::detail::rt::graph_exec_t> execs_;
};

#endif // ARK_HAS_DEVICE_GRAPH_LAUNCH

/// What serves engine_path::device_graphs on platform P: the host model on the host platform,
/// graph_engine where kernels can launch graphs, nothing elsewhere (the communicator refuses
/// engine_path::device_graphs there).
struct no_graph_engine {
  static constexpr bool serves_every_call = false;
  void start(const team_view&, int, int) {}
  void quiesce() {}
  void stop() noexcept {}
};
template <class P>
struct graph_server {
  using type = std::conditional_t<async_device<P>, no_graph_engine, host_graph_engine>;
};
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
template <>
struct graph_server<platform::gpu> {
  using type = graph_engine;
};
#endif


} // namespace ark::dma
