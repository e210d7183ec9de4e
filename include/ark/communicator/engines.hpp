// ark/communicator/engines.hpp: who serves a rank's engine queues (dma::proxy_engine), and how a
// call over such a backend is enqueued. A CPU proxy (engine_path::proxy: dma::gpu_proxy on an
// asynchronous device, dma::host_proxy on the host), or device graphs (engine_path::device_graphs:
// dma::graph_engine, whose launcher kernel runs beside each call the communicator enqueues; its
// host model on the host platform). The queues live in host-visible memory for a proxy, in device
// memory for a launcher kernel (it polls them).
#pragma once

#include "ark/communicator/runtime.hpp"
#include "ark/dma/gpu_proxy.hpp"
#include "ark/dma/graph_engine.hpp"
#include "ark/dma/proxy_engine.hpp"

#include <type_traits>

namespace ark {

template <device P>
class engine_servers {
  template <class Q>
  struct proxy_of {
    using type = dma::host_proxy;
  };
  template <async_device Q>
  struct proxy_of<Q> {
    using type = dma::gpu_proxy<Q>;
  };
  using proxy_type = typename proxy_of<P>::type;
  using graph_type = typename dma::graph_server<P>::type;

public:
  engine_servers() = default;
  engine_servers(const engine_servers&) = delete;
  engine_servers& operator=(const engine_servers&) = delete;
  ~engine_servers() { release(false); }

  /// Allocates the engine queues where their server reads them, points the team handle at them,
  /// and starts the server. Nothing is made without staging (no engine backend can run).
  void start(rank_runtime<P>& rt) {
    team_view& t = rt.team();
    const auto& cfg = rt.cfg();
    const std::uint64_t bytes = dma::engine_bytes(t.lay);
    if (!bytes) return;
    if (cfg.engine == engine_path::device_graphs) {
      if constexpr (P::device_graph_launch) {
        queues_ = P::allocate(bytes, cfg.device); // the launcher polls them: device memory
        t.engine = queues_.ptr;
        t.engine_mode = dma::served_by_graphs | (graph_type::serves_every_call ? dma::launcher_beside : 0u);
        graphs_.start(t, cfg.device, cfg.stream_priority);
      }
    } else {
      proxy_mem_ = P::allocate_control(bytes); // the proxy reads them: host-visible memory
      t.engine = static_cast<std::byte*>(proxy_mem_.device_ptr);
      proxy_.start(static_cast<std::byte*>(proxy_mem_.host_ptr), t.engine, rt.control_host(), t.lay,
                   cfg.device, cfg.stream_priority, rt.shares_context());
    }
  }

  /// Adds what the engine servers hold to `r`.
  void report(const layout& lay, memory_report& r) const {
    r.engine_queues = queues_.ptr ? queues_.bytes : proxy_mem_.host_ptr ? dma::engine_bytes(lay) : 0;
    r.engine_queues_on_device = queues_.ptr != nullptr;
    r.graph_tables = graphs_.table_bytes();
    r.graphs = graphs_.graphs();
    r.streams += proxy_.streams() + graphs_.streams();
  }

  /// Waits until no launcher runs (before the communicator's end clears the error record).
  void quiesce() { graphs_.quiesce(); }

  /// Stops the servers; frees the queues (which the workers write) only when `memory`.
  void release(bool memory) noexcept {
    proxy_.stop();
    graphs_.stop();
    if (memory && queues_.ptr) P::release(queues_);
    if (memory && proxy_mem_.host_ptr) P::release_control(proxy_mem_);
  }

  /// Launches a call's kernel on s, with the device-graph launcher beside it when device graphs
  /// serve the call's backend and run a launcher per call.
  template <class B, class W>
  void enqueue(const rank_runtime<P>& rt, typename P::stream s, launch_shape shape, const W& work) {
    if constexpr (async_device<P> && P::device_graph_launch && !graph_type::serves_every_call &&
                  dma::queue_backend<B>) {
      if (dma::graphs_serve(rt.team())) {
        graphs_.check_capturable(s);
        P::preload(s, work); // before the launcher spins: a lazy load would wait for it
        graphs_.mark(s);
        P::launch(s, shape, work);
        graphs_.serve(s);
        return;
      }
    }
    shape.early = rt.cfg().early_launch;
    P::launch(s, shape, work);
  }

private:
  [[no_unique_address]] proxy_type proxy_;
  [[no_unique_address]] graph_type graphs_;
  typename P::memory queues_{};            ///< the queues, when device graphs serve them
  typename P::control_memory proxy_mem_{}; ///< the queues, when a proxy serves them
};

} // namespace ark
