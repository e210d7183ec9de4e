// ark/internode/nccl_engine.hpp: the inter-node engine over NCCL, a stream engine
// (internode/engine.hpp): its collectives take GPU memory and are enqueued on the call's stream,
// so the hierarchical communicator hands NCCL the rail's share in place, with no staging and no
// host wait. Under HIP, RCCL has the same API; CI does not compile that build (no RCCL package).
// Include it only where NCCL is available (ark.hpp does not), and link NCCL:
//
//   ark::hierarchical_communicator<ark::platform::gpu, ark::nccl_engine> comm(
//       ark::mpi_bootstrap(MPI_COMM_WORLD),
//       [&](auto rail) { return ark::nccl_engine(std::move(rail), device); }, cfg);
//
// One ncclComm_t per rail, made by NCCL's own bootstrap: node 0 of the rail makes the unique id,
// ark's rail bootstrap hands it to the others. NCCL needs a GPU per rank of a communicator: the
// nodes of a rail are on different GPUs (different machines, or different GPUs of one).
//
// Bounds: the communicator is made non-blocking, so its creation and every call's enqueue are
// polled against the engine's bound; a call that never ends on the GPU (a node that never comes)
// is caught by a watchdog thread, which aborts the NCCL communicator once the oldest call the
// engine enqueued has not ended within the bound (NCCL's kernels then return, so the stream moves
// on). After a timeout the engine refuses every call (ark::timeout_error); what the aborted calls
// were to write is undefined. The bound counts from the enqueue, so it must cover the work queued
// before the call on its stream (PyTorch's NCCL watchdog counts the same way).
//
// An average crosses as NCCL's PreMulSum by 1 / divide_by in floating types; integer averages are
// refused (NCCL has no integer division by a world that is not the rail's).
#pragma once

#include "ark/internode/engine.hpp"
#include "ark/platform/collective_library.hpp"
#include "ark/platform/gpu.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ark {

class nccl_engine {
public:
  using gpu = platform::gpu;
  using stream = gpu::stream;

  /// Over the rail's bootstrap, for this rank's GPU `device`; every wait bounded by `timeout`.
  template <bootstrap Boot>
  nccl_engine(Boot rail, int device, std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : s_(std::make_unique<state>()) {
    s_->timeout = timeout;
    s_->device = device;
    rank_ = rail.rank();
    size_ = rail.size();
    gpu::use_device(device);
    ncclUniqueId mine{};
    if (rank_ == 0) check(ncclGetUniqueId(&mine), "ncclGetUniqueId");
    std::vector<ncclUniqueId> all(static_cast<std::size_t>(size_));
    rail.all_gather(&mine, all.data(), sizeof mine); // node 0's is the rail's
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; // polled against the bound
    const ncclResult_t rc = ncclCommInitRankConfig(&s_->comm, size_, all[0], rank_, &cfg);
    try {
      if (rc != ncclSuccess && rc != ncclInProgress) fail(rc, "nccl_engine: ncclCommInitRankConfig");
      settle("nccl_engine: ncclCommInitRankConfig");
    } catch (...) {
      abort_once(*s_);
      throw;
    }
    s_->watchdog = std::thread([st = s_.get()] { watch(*st); });
  }
  nccl_engine(nccl_engine&&) noexcept = default;
  nccl_engine& operator=(nccl_engine&&) noexcept = default;
  ~nccl_engine() {
    if (!s_) return;
    {
      std::lock_guard<std::mutex> lock(s_->m);
      s_->stop = true;
    }
    s_->cv.notify_all();
    if (s_->watchdog.joinable()) s_->watchdog.join();
    for (auto& p : s_->pending) gpu::destroy_event(p.done);
    for (auto e : s_->spare) gpu::destroy_event(e);
    // local, waits for no node (the caller synchronized its streams before the end, as for any
    // communicator); frees what NCCL holds
    abort_once(*s_);
  }

  int rank() { return rank_; }
  int size() { return size_; }

  void all_reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r, stream st) {
    const char* call = "nccl_engine::all_reduce";
    with_op(
        call, t, r,
        [&](ncclRedOp_t op) { return ncclAllReduce(in, out, count, type_of(t), op, s_->comm, st); }, st);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, dtype t, engine_reduction r, stream st) {
    const char* call = "nccl_engine::reduce_scatter";
    with_op(
        call, t, r,
        [&](ncclRedOp_t op) { return ncclReduceScatter(in, out, count, type_of(t), op, s_->comm, st); }, st);
  }
  void all_gather(const void* in, void* out, std::size_t bytes, stream st) {
    enqueue(
        "nccl_engine::all_gather", [&] { return ncclAllGather(in, out, bytes, ncclUint8, s_->comm, st); },
        st);
  }
  void broadcast(const void* in, void* out, std::size_t bytes, int root, stream st) {
    detail::check_root("nccl_engine::broadcast", root, size_);
    enqueue(
        "nccl_engine::broadcast",
        [&] { return ncclBroadcast(in, out, bytes, ncclUint8, root, s_->comm, st); }, st);
  }
  void reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r, int root,
              stream st) {
    const char* call = "nccl_engine::reduce";
    detail::check_root(call, root, size_);
    with_op(
        call, t, r,
        [&](ncclRedOp_t op) { return ncclReduce(in, out, count, type_of(t), op, root, s_->comm, st); }, st);
  }
  /// A send and a receive per node in one NCCL group (every NCCL has these; not all have an
  /// all-to-all call).
  void all_to_all(const void* in, void* out, std::size_t bytes, stream st) {
    enqueue(
        "nccl_engine::all_to_all",
        [&] {
          ncclResult_t rc = ncclGroupStart();
          for (int n = 0; n < size_ && rc == ncclSuccess; ++n) {
            const std::size_t at = static_cast<std::size_t>(n) * bytes;
            rc = ncclSend(static_cast<const std::byte*>(in) + at, bytes, ncclUint8, n, s_->comm, st);
            if (rc == ncclSuccess)
              rc = ncclRecv(static_cast<std::byte*>(out) + at, bytes, ncclUint8, n, s_->comm, st);
          }
          const ncclResult_t end = ncclGroupEnd();
          return rc != ncclSuccess ? rc : end;
        },
        st);
  }

private:
  /// A call the watchdog follows: its end on the stream, and when it was enqueued.
  struct enqueued {
    gpu::event done;
    std::chrono::steady_clock::time_point at;
  };
  /// What the watchdog thread shares with the calls (kept in place when the engine moves).
  struct state {
    ncclComm_t comm = nullptr;
    int device = 0;
    std::chrono::milliseconds timeout{};
    std::mutex m;
    std::condition_variable cv;
    std::deque<enqueued> pending;  ///< oldest first
    std::vector<gpu::event> spare; ///< ended calls' events, for reuse
    bool stop = false;
    bool aborted = false;            ///< ncclCommAbort ran: comm is gone (under m)
    std::atomic<bool> failed{false}; ///< a call timed out and the communicator was aborted
    std::string why;                 ///< what it saw (under m)
    std::thread watchdog;
  };

  /// Runs f(op) with the NCCL op for r on type t; a PreMulSum made for an average is destroyed
  /// once enqueued (NCCL allows it).
  template <class F>
  void with_op(const char* call, dtype t, engine_reduction r, F&& f, stream st) {
    detail::check_engine_reduction(r, call);
    if (r.divide_by <= 1)
      return enqueue(
          call, [&] { return f(op_of(r.k)); }, st);
    if (t != dtype::f32 && t != dtype::f64 && t != dtype::f16 && t != dtype::bf16)
      detail::throw_invalid(call, "an average over NCCL divides in floating types only (NCCL's PreMulSum)");
    alignas(8) std::byte scalar[8]{};
    with_dtype(t, [&](auto e) {
      using T = decltype(e);
      const T v = from_acc<T>(static_cast<acc_t<T>>(1.0 / static_cast<double>(r.divide_by)));
      std::memcpy(scalar, &v, sizeof v);
    });
    ncclRedOp_t op{};
    check(ncclRedOpCreatePreMulSum(&op, scalar, type_of(t), ncclScalarHostImmediate, s_->comm),
          "ncclRedOpCreatePreMulSum");
    try {
      enqueue(
          call, [&] { return f(op); }, st);
    } catch (...) {
      (void)ncclRedOpDestroy(op, s_->comm);
      throw;
    }
    (void)ncclRedOpDestroy(op, s_->comm);
  }

  /// Enqueues f's NCCL call(s) on st and hands the watchdog an event behind them.
  template <class F>
  void enqueue(const char* call, F&& f, stream st) {
    refuse_if_failed(call);
    gpu::use_device(s_->device);
    const ncclResult_t rc = f();
    if (rc != ncclSuccess && rc != ncclInProgress) fail(rc, call);
    settle(call);
    gpu::event e{};
    {
      std::lock_guard<std::mutex> lock(s_->m);
      if (!s_->spare.empty()) e = s_->spare.back(), s_->spare.pop_back();
    }
    if (!e) e = gpu::create_event(s_->device);
    gpu::record(e, st);
    {
      std::lock_guard<std::mutex> lock(s_->m);
      s_->pending.push_back({e, std::chrono::steady_clock::now()});
    }
    s_->cv.notify_all();
  }

  /// A non-blocking communicator's state after a call: polled until it leaves ncclInProgress, or
  /// the bound (then aborted: a timeout).
  void settle(const char* call) {
    const auto deadline = std::chrono::steady_clock::now() + s_->timeout;
    for (unsigned spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(s_->comm, &state), "ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(state, call);
      if (std::chrono::steady_clock::now() > deadline) {
        {
          std::lock_guard<std::mutex> lock(s_->m);
          s_->why = std::string(call) + " did not settle";
        }
        s_->failed = true;
        abort_once(*s_);
        throw timeout_error(std::string(call) + ": node " + std::to_string(rank_) + " of " +
                                std::to_string(size_) + " waited " + std::to_string(s_->timeout.count()) +
                                " ms for the other nodes of its rail",
                            {});
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void refuse_if_failed(const char* call) const {
    if (!s_->failed) return;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(s_->m);
      why = s_->why;
    }
    throw timeout_error(std::string(call) + ": the engine's NCCL communicator was aborted (" + why +
                            "); make a new hierarchical communicator",
                        {});
  }

  /// The watchdog: retires ended calls; aborts the communicator when the oldest has not ended
  /// within the bound.
  static void watch(state& s) {
    gpu::use_device(s.device);
    std::unique_lock<std::mutex> lock(s.m);
    while (!s.stop) {
      if (s.pending.empty()) {
        s.cv.wait(lock, [&] { return s.stop || !s.pending.empty(); });
        continue;
      }
      const enqueued oldest = s.pending.front();
      lock.unlock();
      const bool ended = gpu::reached(oldest.done);
      const bool late = !ended && std::chrono::steady_clock::now() - oldest.at > s.timeout;
      lock.lock();
      if (ended) {
        s.spare.push_back(oldest.done);
        s.pending.pop_front();
        continue;
      }
      if (late && !s.failed) {
        s.why = "a call enqueued " + std::to_string(s.timeout.count()) +
                " ms ago had not ended: a node of the rail did not come";
        s.failed = true;
        lock.unlock();
        abort_once(s); // its kernels return; the streams move on
        lock.lock();
        for (auto& p : s.pending) s.spare.push_back(p.done);
        s.pending.clear();
        continue;
      }
      s.cv.wait_for(lock, std::chrono::microseconds(200), [&] { return s.stop; });
    }
  }

  /// Aborts the communicator once (a timeout, or the engine's end): NCCL frees it.
  static void abort_once(state& s) {
    std::lock_guard<std::mutex> lock(s.m);
    if (s.aborted || !s.comm) return;
    s.aborted = true;
    (void)ncclCommAbort(s.comm);
  }

  [[noreturn]] void fail(ncclResult_t rc, const char* call) const {
    throw platform_error(std::string(call) + ": " + ncclGetErrorString(rc) + " (" +
                         ncclGetLastError(nullptr) + ")");
  }
  void check(ncclResult_t rc, const char* call) const {
    if (rc != ncclSuccess) fail(rc, call);
  }

  static ncclDataType_t type_of(dtype t) {
    switch (t) {
    case dtype::f32:
      return ncclFloat32;
    case dtype::f64:
      return ncclFloat64;
    case dtype::i32:
      return ncclInt32;
    case dtype::i64:
      return ncclInt64;
    case dtype::u8:
      return ncclUint8;
    case dtype::f16:
      return ncclFloat16;
    case dtype::bf16:
      return ncclBfloat16;
    case dtype::i8:
      return ncclInt8;
    }
    return ncclUint8;
  }
  static ncclRedOp_t op_of(op::dynamic::kind k) {
    using K = op::dynamic::kind;
    return k == K::prod ? ncclProd : k == K::min ? ncclMin : k == K::max ? ncclMax : ncclSum;
  }

  std::unique_ptr<state> s_;
  int rank_ = 0, size_ = 0;
};

static_assert(stream_engine<nccl_engine, platform::gpu>);

} // namespace ark
