// ark/dma/graph_engine.hpp: who serves engine_path::device_graphs: graph_engine, which builds a
// rank's copy graphs and runs a launcher graph beside each call, on a platform whose kernels launch
// graphs (P::device_graph_launch; platform::gpu's graph members), and the host model elsewhere.
// The launcher loop, routing and signal step are dma/graph_launcher.hpp.
#pragma once

#include "ark/dma/graph_launcher.hpp"
#include "ark/dma/host_graph_engine.hpp"

#include <type_traits>
#include <utility>
#include <vector>

namespace ark::dma {

/// The kernel node of every copy graph: one thread, after the copy landed; copies of one channel
/// land in any order, so it waits (bounded) for the channel's previous one.
template <class P>
ARK_KERNEL void graph_signal_kernel(graph_state v, std::uint32_t ticket) {
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
template <class P>
ARK_KERNEL void graph_launcher_kernel(graph_state v, typename P::graph_exec* graphs) {
  if (typename P::worker_scope{}.thread_rank() != 0) return;
  auto launch = [&](std::uint32_t ticket, unsigned cls) {
    return P::launch_graph_detached(graphs[ticket * v.classes + cls]);
  };
  const serve_end e = serve_call<P>(v, launch, [] { return true; });
  if (e == serve_end::rearm && !P::relaunch_own_graph())
    record_error<P>(v.team, errc::platform, static_cast<std::uint32_t>(wait_kind::engine), -1, 0, 0, 2, 0);
}

/// The engine of one rank on a platform whose kernels launch graphs (P::device_graph_launch):
/// the copy graphs, the launcher graph and the stream it runs on.
template <async_device P>
class graph_engine {
public:
  using stream = typename P::stream;
  using exec = typename P::graph_exec;

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
    stop();
    device_ = device;
    P::use_device(device);
    const layout& l = t.lay;
    const unsigned classes = graph_classes(l);
    const std::size_t tickets = std::size_t(l.all_workers()) * l.world * l.slots,
                      chans = std::size_t(l.all_workers()) * l.world;
    const std::size_t bytes =
        tickets * sizeof(graph_ticket) + 2 * chans * 8 + 8 + tickets * classes * sizeof(exec);
    mem_ = P::allocate(bytes, device); // zeroed
    std::byte* p = mem_.ptr;
    view_.team = t;
    view_.tickets = reinterpret_cast<graph_ticket*>(p);
    view_.chan_seq = reinterpret_cast<std::uint64_t*>(p + tickets * sizeof(graph_ticket));
    view_.chan_landed = view_.chan_seq + chans;
    view_.ended = view_.chan_landed + chans;
    graphs_ = reinterpret_cast<exec*>(view_.ended + 1);
    view_.classes = classes;
    view_.timeout_ns = engine_timeout_ns(t.timeout_ns);
    stream_ = P::create_stream(device, priority);
    fork_ = P::create_event(device);
    join_ = P::create_event(device);
    events_ = true;

    std::vector<exec> table(tickets * classes, exec{});
    for (unsigned w = 0; w < l.all_workers(); ++w)
      for (int peer = 0; peer < t.world; ++peer) {
        if (peer == t.rank) continue;
        for (unsigned slot = 0; slot < l.slots; ++slot) {
          std::uint32_t ticket = graph_ticket_of(l, w, peer, slot);
          for (unsigned k = 0; k < classes; ++k) {
            const graph_copy c = graph_copy_of(view_.team, ticket, k);
            void* args[] = {&view_, &ticket};
            execs_.push_back(
                P::make_device_graph(stream_, c.dst, c.src, c.bytes, &graph_signal_kernel<P>, 1, args));
            table[ticket * classes + k] = execs_.back();
          }
        }
      }
    P::copy(graphs_, table.data(), table.size() * sizeof(exec));
    void* args[] = {&view_, &graphs_}; // the launcher: one kernel node of one warp
    launcher_ = P::make_device_graph(stream_, nullptr, nullptr, 0, &graph_launcher_kernel<P>, 32, args);
    has_launcher_ = true;
    P::synchronize(stream_); // the uploads
  }

  /// Throws before anything is enqueued if `s` is being captured into a graph.
  static void check_capturable(stream s) {
    if (P::capturing(s))
      ark::detail::throw_invalid("proxy_engine", "served by device graphs (engine_path::device_graphs), it "
                                                 "cannot be captured in a CUDA graph: its launcher is a "
                                                 "device-launch graph of its own");
  }

  /// Marks where on `s` the call begins (before its kernel is enqueued).
  void mark(stream s) { P::record(fork_, s); }
  /// Once the call's kernel is enqueued on `s`: runs the launcher beside it (ordered after what
  /// preceded the call on `s`) and makes the rest of `s` wait until the launcher has served it.
  /// If enqueueing the kernel failed, no launcher was started.
  void serve(stream s) {
    P::wait_for(stream_, fork_);
    P::launch_graph(launcher_, stream_);
    P::record(join_, stream_);
    P::wait_for(s, join_);
  }

  /// Waits until no launcher runs.
  void quiesce() {
    if (!mem_.ptr) return;
    try {
      P::use_device(device_);
      P::synchronize(stream_);
    } catch (...) { // a launcher that failed recorded it
    }
  }

  void stop() noexcept {
    if (!mem_.ptr) return;
    quiesce();
    for (auto g : execs_) P::destroy_graph(g);
    execs_.clear();
    if (has_launcher_) P::destroy_graph(launcher_), has_launcher_ = false;
    if (events_) P::destroy_event(fork_), P::destroy_event(join_), events_ = false;
    if (stream_) P::destroy_stream(std::exchange(stream_, stream{}));
    P::release(mem_);
  }

  /// Copy graphs instantiated (workers x peers x slots x size classes).
  std::size_t graphs() const { return execs_.size(); }
  /// Device memory of its own: tickets, counters, the graph table.
  std::size_t table_bytes() const { return mem_.ptr ? mem_.bytes : 0; }
  /// Streams it holds (the launcher's).
  std::size_t streams() const { return stream_ ? 1 : 0; }

private:
  int device_ = 0;
  typename P::memory mem_{};
  graph_state view_{};
  exec* graphs_ = nullptr; ///< device memory: [ticket * classes + class]
  stream stream_{};
  typename P::event fork_{}, join_{};
  bool events_ = false, has_launcher_ = false;
  exec launcher_{};
  std::vector<exec> execs_;
};

/// What serves engine_path::device_graphs on platform P: the host model on the host platform,
/// graph_engine where kernels can launch graphs, nothing elsewhere (the communicator refuses
/// engine_path::device_graphs there).
struct no_graph_engine {
  static constexpr bool serves_every_call = false;
  void start(const team_view&, int, int) {}
  void quiesce() {}
  void stop() noexcept {}
  std::size_t graphs() const { return 0; }
  std::size_t table_bytes() const { return 0; }
  std::size_t streams() const { return 0; }
};
template <class P>
struct graph_server {
  using type = host_graph_engine;
};
template <async_device P>
struct graph_server<P> {
  using type = std::conditional_t<P::device_graph_launch, graph_engine<P>, no_graph_engine>;
};

} // namespace ark::dma
