// ark/platform/gpu.hpp: the GPU platform, one implementation for CUDA and HIP.
//
// Symmetric regions are device memory. Ranks driven by one process reach each other's memory
// through peer access (checked: a clear error if two GPUs cannot reach each other); ranks in
// different processes exchange IPC handles. Flags use system-scope acquire/release; control
// blocks are mapped pinned host memory, so the host reads errors and writes abort flags while
// kernels run. A launch is one kernel: a block per worker, each block's threads a block_scope.
//
// Vendor spellings are not here: runtime calls are detail::rt names (platform/gpu_runtime.hpp,
// spelled in platform/cuda/ and platform/hip/), device atomics detail::gpu names
// (platform/gpu_atomics.hpp). The #ifs left in this file choose between the device pass and the
// host pass of one compilation, and name the platform (cuda or hip) at the end.
#pragma once

#include "ark/concepts/device.hpp"
#include "ark/core/vec.hpp"
#include "ark/platform/gpu_atomics.hpp"
#include "ark/platform/gpu_runtime.hpp"
#include "ark/platform/gpu_memory.hpp"
#include "ark/platform/gpu_scope.hpp"
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
#include "ark/platform/cuda/graphs.hpp"
#endif
#include "ark/platform/host.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <utility>
#include <vector>
#include <unistd.h>

namespace ark {
namespace detail {
/// Threads per worker the collective kernel is compiled for (communicator checks tuning.threads).
/// One 512-thread block per SM (__launch_bounds__ below) leaves ptxas 128 registers a thread,
/// which the two-shot and ring kernels need to run without spilling to local memory (at 1024
/// threads they spilled: docs/perf.md).
inline constexpr unsigned gpu_max_worker_threads = 512;

/// The kernel create_stream runs once on every stream it makes (a template, so that every
/// translation unit may hold it).
template <int = 0>
__global__ void first_use() {}

/// The collective kernel: work(g, worker, workers) in every block. A work with
/// prepare(worker, workers) computes there, before the wait for the stream's previous kernel,
/// what depends on its parameters alone, and runs as work(g, prepared) after it: a kernel
/// launched early (gpu::launch) then does that work while the previous kernel still runs
/// (what it saves: docs/perf.md). Nothing before follow_previous_grid() touches memory the
/// previous kernel may write: prepare() reads only the work's own parameters.
template <class F>
__global__ void __launch_bounds__(gpu_max_worker_threads, 1) run_workers(const ARK_GRID_CONSTANT F work) {
  block_scope g;
#if defined(ARK_DEVICE_PASS)
  if constexpr (requires { work.prepare(0u, 1u); }) {
    const auto prepared = work.prepare(blockIdx.x, gridDim.x);
    gpu::follow_previous_grid();
    work(g, prepared);
    return;
  } else {
    gpu::follow_previous_grid();
  }
#endif
  work(g, blockIdx.x, gridDim.x);
}

} // namespace detail

namespace platform {

struct gpu : gpu_memory {
  static constexpr const char* name = detail::rt::vendor;
  static constexpr bool synchronous_launch = false;
  static constexpr unsigned max_worker_threads = detail::gpu_max_worker_threads;
  /// Kernels can launch CUDA graphs: code built with relocatable device code and linked with
  /// cudadevrt (engine_path::device_graphs needs it).
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
  static constexpr bool device_graph_launch = true;
#else
  static constexpr bool device_graph_launch = false;
#endif
  using stream = detail::rt::stream_t;
  using event = detail::rt::event_t;
  /// The threads of one worker (a thread block), as launch's work receives them.
  using worker_scope = block_scope;

#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
  // Graphs that kernels launch (platform/cuda/graphs.hpp): what dma::graph_engine is built on.
  using graph_exec = detail::rt::graph_exec_t;
  /// A graph "copy `bytes` from src to dst (none if 0), then kernel k<<<1, threads>>>(args...)",
  /// instantiated for device launch and uploaded on s (wait for s before its first launch).
  template <class... A>
  static graph_exec make_device_graph(stream s, void* dst, const void* src, std::size_t bytes,
                                      void (*k)(A...), unsigned threads, void** args) {
    namespace rt = detail::rt;
    rt::graph_t g = nullptr;
    rt::graph_node_t copy = nullptr, node = nullptr;
    rt::check(rt::graph_create(&g), "create graph");
    graph_exec e = nullptr;
    rt::error_t err = bytes ? rt::graph_add_copy(&copy, g, dst, src, bytes) : rt::success;
    if (err == rt::success) err = rt::graph_add_kernel(&node, g, bytes ? &copy : nullptr, k, threads, args);
    if (err == rt::success) err = rt::graph_instantiate_for_device_launch(&e, g);
    (void)rt::graph_destroy(g);
    rt::check(err, "instantiate a graph for device launch");
    err = rt::graph_upload(e, s);
    if (err != rt::success) (void)rt::graph_exec_destroy(e);
    rt::check(err, "upload a graph");
    return e;
  }
  /// Launches e on s from the host.
  static void launch_graph(graph_exec e, stream s) {
    detail::rt::check(detail::rt::graph_launch(e, s), "launch a graph");
  }
  static void destroy_graph(graph_exec e) { (void)detail::rt::graph_exec_destroy(e); }
  /// Device code: launches e to run apart from the launching kernel and from every other graph
  /// launched so, in any order; false if refused (e's previous execution has not ended).
  ARK_DEVICE static bool launch_graph_detached(graph_exec e) {
    return detail::rt::graph_launch_fire_and_forget(e);
  }
  /// Device code: launches the graph whose kernel calls this again, once its execution ended.
  ARK_DEVICE static bool relaunch_own_graph() { return detail::rt::graph_tail_launch_self(); }
#endif

  // 1-2. atomics and clock: device code uses the GPU's; host code the host's ---------------------
#if defined(ARK_DEVICE_PASS)
#define ARK_GPU_OR_HOST(gpu_call, host_call) return gpu_call
#else
#define ARK_GPU_OR_HOST(gpu_call, host_call) return host_call
#endif
  ARK_HD static std::uint64_t load_acquire(const std::uint64_t* p) {
    ARK_GPU_OR_HOST(detail::gpu::load_acquire(p), host::load_acquire(p));
  }
  ARK_HD static std::uint64_t load_relaxed(const std::uint64_t* p) {
    ARK_GPU_OR_HOST(detail::gpu::load_relaxed(p), host::load_relaxed(p));
  }
  ARK_HD static std::uint32_t load_relaxed(const std::uint32_t* p) {
    ARK_GPU_OR_HOST(detail::gpu::load_relaxed(p), host::load_relaxed(p));
  }
  ARK_HD static void store_release(std::uint64_t* p, std::uint64_t v) {
    ARK_GPU_OR_HOST(detail::gpu::store_release(p, v), host::store_release(p, v));
  }
  ARK_HD static void store_release(std::uint32_t* p, std::uint32_t v) {
    ARK_GPU_OR_HOST(detail::gpu::store_release(p, v), host::store_release(p, v));
  }
  ARK_HD static void store_relaxed(std::uint64_t* p, std::uint64_t v) {
    ARK_GPU_OR_HOST(detail::gpu::store_relaxed(p, v), host::store_relaxed(p, v));
  }
  /// Relaxed: a load whose value was consumed before the barrier has completed, and GPUs never
  /// perform a store before a completed earlier load; a release would also wait for this
  /// thread's stores into peer memory, a full NVLink round trip.
  ARK_HD static void store_after_reads(std::uint64_t* p, std::uint64_t v) { store_relaxed(p, v); }
  /// Relaxed, for the same reason: a store that depends on the loaded value (through the branch
  /// that ends a credit wait) is never performed before the load returns.
  ARK_HD static std::uint64_t load_before_writes(const std::uint64_t* p) { return load_relaxed(p); }
  ARK_HD static std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
    ARK_GPU_OR_HOST(detail::gpu::fetch_add(p, v), host::fetch_add(p, v));
  }
  ARK_HD static bool compare_exchange(std::uint32_t* p, std::uint32_t expected, std::uint32_t desired) {
    ARK_GPU_OR_HOST(detail::gpu::compare_exchange(p, expected, desired),
                    host::compare_exchange(p, expected, desired));
  }
  ARK_HD static void fence() { ARK_GPU_OR_HOST(detail::gpu::fence(), host::fence()); }
  ARK_HD static std::uint64_t now_ns() { ARK_GPU_OR_HOST(detail::gpu::now_ns(), host::now_ns()); }
  ARK_HD static void pause(unsigned spins) { ARK_GPU_OR_HOST((void)spins, host::pause(spins)); }

  // 3. vectors ---------------------------------------------------------------------------------
  template <std::size_t V>
  ARK_HD static vec<V> load(const void* p) {
    return *static_cast<const vec<V>*>(p);
  }
  /// Data peers wrote: volatile loads, never served from a stale L1 line.
  template <std::size_t V>
  ARK_HD static vec<V> load_peer(const void* p) {
#if defined(ARK_DEVICE_PASS)
    vec<V> v;
    if constexpr (V == 16)
      detail::gpu::load_pair_volatile(p, v.w[0], v.w[1]);
    else
      v.w[0] = detail::gpu::load_volatile(p);
    return v;
#else
    return host::load_peer<V>(p);
#endif
  }
  template <std::size_t V>
  ARK_HD static void store(void* p, const vec<V>& v) {
    *static_cast<vec<V>*>(p) = v;
  }

  // 4. LL packets ------------------------------------------------------------------------------
  ARK_HD static void store_ll(std::uint64_t* p, std::uint64_t a, std::uint64_t b) {
    ARK_GPU_OR_HOST(detail::gpu::store_pair_volatile(p, a, b), host::store_ll(p, a, b));
  }
  ARK_HD static void load_ll(const std::uint64_t* p, std::uint64_t& a, std::uint64_t& b) {
    ARK_GPU_OR_HOST(detail::gpu::load_pair_volatile(p, a, b), host::load_ll(p, a, b));
  }
  /// v, no longer known to the compiler as the kernel parameter it was read from: what a work's
  /// prepare() computes from it before the wait for the previous kernel (run_workers) is then
  /// reused after the wait, not computed again (the wait's memory clobber would have the compiler
  /// read the parameter again).
  ARK_HD static std::uint64_t opaque(std::uint64_t v) { ARK_GPU_OR_HOST(detail::gpu::opaque(v), v); }
  ARK_HD static std::uint32_t opaque(std::uint32_t v) { ARK_GPU_OR_HOST(detail::gpu::opaque(v), v); }
  /// Computes v here, before any wait that follows (the compiler may not defer it).
  ARK_HD static void compute_here(std::uint64_t v) { ARK_GPU_OR_HOST(detail::gpu::compute_here(v), (void)v); }
#undef ARK_GPU_OR_HOST

  // 5. memory (host side) ----------------------------------------------------------------------
  static int device_count() {
    int n = 0;
    if (detail::rt::get_device_count(&n) != detail::rt::success) {
      (void)detail::rt::get_last_error();
      return 0;
    }
    return n;
  }

  /// Which GPU `device` is, named as every process of the node names it, and its SMs (device
  /// concept, item 7: ranks that share a GPU split them).
  static gpu_placement placement(int device) {
    gpu_placement p;
    detail::rt::check(detail::rt::pci_bus_id(p.pci, static_cast<int>(sizeof p.pci), device),
                      "query the GPU's PCI address");
    int sms = 0;
    detail::rt::check(detail::rt::multiprocessor_count(&sms, device), "query the GPU's SMs");
    p.sms = sms;
    p.queues = hardware_queues();
    p.process = detail::process_token();
    return p;
  }
  /// A span of `ns` nanoseconds as device code's now_ns() on `device` counts it (ROCm's wall clock
  /// runs at the GPU's rate; now_ns() assumes 100 MHz).
  static std::uint64_t device_span_ns(std::uint64_t ns, int device) {
    return detail::span_on_clock(ns, detail::rt::clock_khz_assumed, detail::rt::clock_khz(device));
  }
  /// The hardware queues a context spreads its streams over, as set in the environment (the
  /// runtime reads it once, when it starts): CUDA_DEVICE_MAX_CONNECTIONS (8 unless set, at most
  /// 32), on ROCm GPU_MAX_HW_QUEUES (4 unless set). Streams on one queue run their steps in the
  /// order they were enqueued.
  static constexpr const char* hardware_queues_variable = detail::rt::hardware_queues_variable;
  static int hardware_queues() {
    const char* v = std::getenv(hardware_queues_variable);
    const int n = v ? std::atoi(v) : 0;
    return n > 0 ? std::min(n, detail::rt::hardware_queues_most) : detail::rt::hardware_queues_unset;
  }

public:
  // 6. execution -------------------------------------------------------------------------------
  /// A non-blocking stream; `priority` as the runtime's stream priorities (lower runs first),
  /// clamped to the device's range. Used once (an empty kernel, waited for) before it is
  /// returned: where ranks share a GPU, a stream's first use, like its making, can wait for the
  /// kernels running in the context, a peer's waiting for this rank among them; streams are made
  /// before a communicator's first call, so that wait never comes during a call (docs/perf.md).
  static stream create_stream(int device, int priority = 0) {
    detail::rt::check(detail::rt::set_device(device), "set device");
    if (priority != 0) {
      int least = 0, greatest = 0;
      detail::rt::check(detail::rt::stream_priority_range(&least, &greatest), "query stream priorities");
      priority = priority < greatest ? greatest : priority > least ? least : priority;
    }
    if (stream s = stream_pool().take(device, priority)) return s;
    stream s{};
    if (priority == 0)
      detail::rt::check(detail::rt::stream_create(&s), "create stream");
    else
      detail::rt::check(detail::rt::stream_create_priority(&s, priority), "create stream");
    detail::first_use<<<1, 1, 0, s>>>();
    detail::rt::error_t e = detail::rt::get_last_error();
    if (e == detail::rt::success) e = detail::rt::stream_synchronize(s);
    if (e != detail::rt::success) {
      (void)detail::rt::stream_destroy(s);
      detail::rt::check(e, "use the new stream once");
    }
    return s;
  }
  /// Gives a stream made by create_stream back, once its work ended. It is kept for the next
  /// create_stream of its GPU and priority rather than destroyed: a context spreads its streams
  /// over its hardware queues as they are made, so a process that makes and destroys streams (a
  /// communicator's, call after call) ends up with live streams that share a queue although
  /// there are fewer than queues, and where ranks share a context a step that waits on one
  /// holds up a peer's step on the other (docs/guide.md, "Ranks that share a GPU"). Kept, the streams a
  /// process made are as many as it ever held at once, and making none later cannot wait for
  /// the kernels running in the context either.
  static void destroy_stream(stream s) {
    int device = 0;
    if (detail::rt::stream_synchronize(s) != detail::rt::success ||
        detail::rt::stream_device(s, &device) != detail::rt::success) {
      (void)detail::rt::get_last_error();
      (void)detail::rt::stream_destroy(s);
      return;
    }
    int priority = 0;
    (void)detail::rt::stream_get_priority(s, &priority);
    stream_pool().give(device, priority, s);
  }
  static void synchronize(stream s) {
    detail::rt::check(detail::rt::stream_synchronize(s), "synchronize stream");
  }
  /// An event for order_after on `device`'s streams. Made with the communicator, never during a
  /// call: creating a stream can wait for the kernels running on the GPU (dma/gpu_proxy.hpp), and
  /// an event is not trusted to differ.
  static event create_event(int device) {
    detail::rt::check(detail::rt::set_device(device), "set device");
    event e{};
    detail::rt::check(detail::rt::event_create_untimed(&e), "create event");
    return e;
  }
  static void destroy_event(event e) { (void)detail::rt::event_destroy(e); }
  /// Work enqueued on `s` from now on starts only after the work enqueued on `before` so far: `e`
  /// recorded on `before`, waited for by `s` (no host wait). A wait takes the event as last
  /// recorded when it is enqueued, so one event serves every ordering, one after the other.
  static void order_after(stream s, stream before, event e) {
    record(e, before);
    wait_for(s, e);
  }
  /// order_after's halves: `e` recorded on `s`; `s` waits for `e` as last recorded.
  static void record(event e, stream s) {
    detail::rt::check(detail::rt::event_record(e, s), "order streams");
  }
  static void wait_for(stream s, event e) {
    detail::rt::check(detail::rt::stream_wait_event(s, e), "order streams");
  }
  /// Waits on the host for the work before `e`'s last record.
  static void synchronize(event e) {
    detail::rt::check(detail::rt::event_synchronize(e), "wait for an event");
  }
  /// Page-locked host memory: copies between it and a GPU run on a copy engine, in stream order.
  static void* allocate_pinned(std::size_t bytes) {
    void* p = nullptr;
    detail::rt::check(detail::rt::host_alloc_mapped(&p, bytes), "allocate pinned host memory");
    return p;
  }
  static void release_pinned(void* p) {
    if (p) (void)detail::rt::free_host(p);
  }
  /// Whether the work before `e`'s last record has ended (an event never recorded has).
  static bool reached(event e) {
    const auto rc = detail::rt::event_query(e);
    if (rc == detail::rt::not_ready) return false;
    detail::rt::check(rc, "query event");
    return true;
  }
  /// Makes `device` the calling thread's current GPU (a thread that serves a rank: its proxy).
  static void use_device(int device) { detail::rt::check(detail::rt::set_device(device), "set device"); }
  /// The calling thread's current GPU.
  static int current_device() {
    int device = 0;
    detail::rt::check(detail::rt::get_device(&device), "get the current device");
    return device;
  }
  /// A copy ordered on `s` (a copy engine moves it; between any two addresses either GPU reaches).
  static void copy_async(void* dst, const void* src, std::size_t bytes, stream s) {
    detail::rt::check(detail::rt::memcpy_async(dst, src, bytes, s), "copy");
  }
  /// *p = v ordered on `s`, after a memory barrier over the stream's earlier work: the copies
  /// before it have landed where the reader of *p looks. `p`: device or mapped host memory.
  static void write_value_async(stream s, std::uint64_t* p, std::uint64_t v) {
    detail::rt::check(detail::rt::stream_write_value(s, p, v), "write a value on a stream");
  }
  /// Whether work enqueued on `s` is being captured into a graph.
  static bool capturing(stream s) { return detail::rt::is_capturing(s); }

  /// Loads the kernel that launch(s, shape, work) runs before its first launch. With lazy module
  /// loading (CUDA's default) the first launch of a kernel loads it, and a load waits for the
  /// kernels running in the context: one that spins until this kernel runs (the device-graph
  /// launcher) would wait for ever.
  template <class F>
  static void preload(stream s, const F&) {
    static std::atomic<std::uint64_t> loaded{0}; // one bit per device: modules load per context
    int device = 0;
    detail::rt::check(detail::rt::stream_device(s, &device), "find the stream's device");
    const std::uint64_t bit = device < 64 ? std::uint64_t{1} << device : 0;
    if (bit && (loaded.load(std::memory_order_relaxed) & bit)) return;
    detail::rt::check(detail::rt::set_device(device), "set device");
    detail::rt::check(detail::rt::load_function(reinterpret_cast<const void*>(&detail::run_workers<F>)),
                      "load collective kernel");
    loaded.fetch_or(bit, std::memory_order_relaxed);
  }

  /// Whether run_workers<F> may be launched early on the current device: only code built for
  /// sm_90 or later waits for the previous grid (a binary built for an older GPU and compiled
  /// from its PTX on a Hopper would not). Asked once per device.
  template <class F>
  static bool early_capable() {
    static std::atomic<std::uint64_t> known{0}, capable{0}; // one bit per device
    int device = 0;
    if (detail::rt::get_device(&device) != detail::rt::success || device >= 64) return false;
    const std::uint64_t bit = std::uint64_t{1} << device;
    if (known.load(std::memory_order_acquire) & bit) return capable.load(std::memory_order_relaxed) & bit;
    if (detail::rt::built_for_sm90(reinterpret_cast<const void*>(&detail::run_workers<F>)))
      capable.fetch_or(bit, std::memory_order_relaxed);
    known.fetch_or(bit, std::memory_order_release);
    return capable.load(std::memory_order_relaxed) & bit;
  }

  /// The GPU a stream belongs to; -1 while it is being captured (querying is not allowed then).
  static int stream_device(stream s) {
    if (detail::rt::is_capturing(s)) return -1;
    int device = 0;
    detail::rt::check(detail::rt::stream_device(s, &device), "find the stream's device");
    return device;
  }

  /// Launches on the stream's device (while a stream is being captured, querying its device is
  /// not allowed: the calling thread's current device is used, as CUDA requires anyway).
  template <class F>
  static void launch(stream s, launch_shape shape, const F& work) {
    if (!detail::rt::is_capturing(s)) {
      int device = 0;
      detail::rt::check(detail::rt::stream_device(s, &device), "find the stream's device");
      detail::rt::check(detail::rt::set_device(device), "set device");
    }
    if constexpr (detail::rt::has_early_launch) { // HIP has no programmatic dependent launch
      if (shape.early && early_capable<F>()) {
        detail::rt::check(
            detail::rt::launch_early(&detail::run_workers<F>, shape.workers, shape.threads, s, work),
            "launch collective kernel");
        return;
      }
    }
    detail::run_workers<F><<<shape.workers, shape.threads, 0, s>>>(work);
    detail::rt::check(detail::rt::get_last_error(), "launch collective kernel");
  }
  /// After a launch of your own kernel (<<<...>>>): throws platform_error, naming `what` and the
  /// runtime's reason, if it failed to launch (too many resources asked, a bad configuration),
  /// which a later synchronize would not report.
  static void check_launch(const char* what) { detail::rt::check(detail::rt::get_last_error(), what); }
};

static_assert(async_device<gpu> && shared_device<gpu>);

#if defined(ARK_COMPILER_CUDA)
using cuda = gpu;
#else
using hip = gpu;
#endif

} // namespace platform
} // namespace ark
