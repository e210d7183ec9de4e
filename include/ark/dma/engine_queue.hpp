// ark/dma/engine_queue.hpp: the request queues of an engine backend (dma::proxy_engine), one per
// worker, and who serves them.
//
// The queues are not in the symmetric region: they live in the rank's engine memory
// (team_view::engine), host-visible where a CPU proxy drains them (dma/gpu_proxy.hpp,
// host_proxy), device memory where a launcher kernel does (engine_path::device_graphs,
// dma/graph_engine.hpp). Each queue holds 2 x slots + 2 requests: a worker keeps at most Depth
// copies uncompleted, and a call's last request (request_end) takes no credit.
#pragma once

#include "ark/config.hpp"
#include "ark/team/team.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace ark {

/// One request in an engine backend's queue.
struct engine_request {
  std::uint64_t dst; // destination address (0: none)
  std::uint64_t src; // source address
  std::uint64_t bytes;
  std::uint64_t flag; // flag address to set after the copy (0: none)
  std::uint64_t value;
  std::uint64_t kind; // request_copy, or request_end: the worker's last request of a call
  std::uint64_t pad[2];
};
inline constexpr std::uint64_t request_copy = 0;
/// A worker's last request of a call (value: the call's worker count), posted only when the
/// queues are served by device graphs (dma/graph_engine.hpp), whose launcher runs for one call.
inline constexpr std::uint64_t request_end = 1;

/// Producer/consumer counters of one worker's engine queue, followed by its requests.
struct engine_queue {
  std::uint64_t posted; ///< requests the worker posted
  std::uint64_t pad0[7];
  std::uint64_t completed; ///< requests the engine completed
  std::uint64_t pad1[7];
  std::uint64_t taken; ///< requests the device-graph launcher has taken (its own counter)
  std::uint64_t pad2[7];
};

/// Who serves a rank's engine queues (dma::proxy_engine): communicator_config::engine.
enum class engine_path : std::uint32_t {
  proxy = 0,         ///< a CPU thread: memcpy on the host platform, copy-engine stream work on GPUs
  device_graphs = 1, ///< CUDA: a launcher kernel launches pre-instantiated copy graphs, no CPU
};

namespace dma {

/// team_view::engine_mode bits.
inline constexpr std::uint32_t served_by_graphs = 1; ///< engine_path::device_graphs serves the queues
inline constexpr std::uint32_t launcher_beside = 2;  ///< a launcher serves this very call

/// Whether device graphs serve the rank's queues, and whether a launcher runs beside this call
/// (the communicator enqueues one beside each call it makes; the host model's always runs).
ARK_HD inline bool graphs_serve(const team_view& t) { return (t.engine_mode & served_by_graphs) != 0; }
ARK_HD inline bool launcher_runs(const team_view& t) { return (t.engine_mode & launcher_beside) != 0; }

/// A backend that posts its copies to the engine queues (dma::proxy_engine and those built on it);
/// served(t) says whether a call made with team handle t will be served.
template <class B>
concept queue_backend = requires(const team_view& t) {
  { B::served(t) } -> std::same_as<bool>;
};

/// Requests one worker's queue holds.
ARK_HD inline std::uint32_t queue_capacity(const layout& l) { return 2 * l.slots + 2; }

/// Worker w's queue in a rank's engine memory, and the requests after it.
ARK_HD inline engine_queue* queue(const layout& l, std::byte* engine, unsigned w) {
  return reinterpret_cast<engine_queue*>(
      engine + w * (sizeof(engine_queue) + queue_capacity(l) * sizeof(engine_request)));
}
ARK_HD inline engine_request* requests(const layout& l, std::byte* engine, unsigned w) {
  return reinterpret_cast<engine_request*>(queue(l, engine, w) + 1);
}
/// Bytes of a rank's engine memory: none without staging (no engine backend can run).
ARK_HD inline std::uint64_t engine_bytes(const layout& l) {
  return l.has_staging()
             ? l.all_workers() * (sizeof(engine_queue) + queue_capacity(l) * sizeof(engine_request))
             : 0;
}

} // namespace dma
} // namespace ark
