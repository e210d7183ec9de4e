// ark/internode/mpi_engine.hpp: the inter-node engine over MPI. Include it only where <mpi.h>
// is available (ark.hpp does not). It runs on its own duplicate of the rail's MPI communicator,
// which the hierarchical communicator splits off an mpi_bootstrap:
//
//   MPI_Init(&argc, &argv);
//   ark::hierarchical_communicator<ark::platform::host, ark::mpi_engine> comm(
//       ark::mpi_bootstrap(MPI_COMM_WORLD));
//
// Two ways to hold memory (mpi_memory), chosen when the engine is made:
// - Host memory (any MPI): each call copies into the engine's own buffers and posts a
//   nonblocking collective on them, polled against the engine's bound: a node that never comes is
//   ark::timeout_error, never a hang. MPI cannot cancel a collective request, so the one that
//   timed out stays posted on the engine's communicator, which then refuses every call (its next
//   collective would pair with the abandoned one), and keeps the buffers it was given: they are
//   the engine's own, never the caller's. On a GPU the hierarchical communicator stages through
//   pinned host memory for it.
// - Device memory (an MPI that says it is CUDA- or ROCm-aware, platform/mpi_device_memory.hpp):
//   the calls post on the caller's buffers, GPU memory included, with no copy (device_memory()).
//   GPU-aware MPIs take device buffers in blocking collectives, not nonblocking ones (Open MPI's
//   libnbc reads them on the CPU), so each call runs blocking on the engine's own thread, which the
//   caller waits for against the bound. A call that timed out leaves that thread inside MPI with
//   the caller's buffers until the other nodes come, or for good: the caller must never free them
//   (the hierarchical communicator gives the engine its own staging, and keeps it after a
//   timeout), and, as above, the engine refuses every later call. The caller divides averages
//   (divide_by must be 1: the engine cannot touch GPU memory itself), and in and out are distinct
//   except where MPI_IN_PLACE says the same (all-reduce, all-gather, reduce at the root). The
//   engine's thread calls MPI while the caller waits, so MPI must be initialized with
//   MPI_THREAD_SERIALIZED at least.
// The 16-bit floats reduce through MPI ops of the engine's own (in float, rounded back at each
// step), the others through MPI's.
#pragma once

#include "ark/bootstrap/mpi.hpp"
#include "ark/internode/engine.hpp"
#include "ark/platform/mpi_device_memory.hpp"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ark {

/// The memory an mpi_engine's calls take (see the top of this file).
enum class mpi_memory {
  host,   ///< host memory, through the engine's own buffers
  device, ///< the caller's buffers, GPU memory included: the MPI library must be GPU-aware
  /// device where the environment variable ARK_MPI_DEVICE_MEMORY is 1, host where it is 0, and
  /// unset, device where the MPI library says it is GPU-aware
  library,
};

class mpi_engine {
public:
  /// Over the rail's MPI communicator (duplicated: the engine's requests never meet the
  /// bootstrap's), with the bootstrap's bound unless one is given.
  explicit mpi_engine(mpi_bootstrap rail, std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      mpi_memory memory = mpi_memory::library)
      : timeout_(timeout) {
    const bool device = resolve(memory);
    MPI_Comm dup = MPI_COMM_NULL;
    check(MPI_Comm_dup(rail.comm(), &dup), "MPI_Comm_dup");
    comm_ = std::shared_ptr<MPI_Comm>(new MPI_Comm(dup), [](MPI_Comm* c) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
      delete c;
    });
    MPI_Comm_rank(dup, &rank_);
    MPI_Comm_size(dup, &size_);
    if (device) runner_ = runner_owner(blocking_runner::make());
  }

  int rank() { return rank_; }
  int size() { return size_; }
  /// Whether the calls take the caller's buffers, GPU memory included (mpi_memory::device).
  bool device_memory() const { return runner_.p != nullptr; }

  void all_reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r) {
    const char* call = "mpi_engine::all_reduce";
    detail::check_engine_reduction(r, call);
    start(call, count);
    if (device_memory()) {
      undivided(call, r);
      return blocking(call, [=, c = comm()] {
        return MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, as_int(count), type_of(t), op_of(t, r.k), c);
      });
    }
    auto& b = next(count * size_of(t), count * size_of(t));
    std::memcpy(b.in.data(), in, b.in.size());
    check(MPI_Iallreduce(b.in.data(), b.out.data(), as_int(count), type_of(t), op_of(t, r.k), comm(), &b.req),
          "MPI_Iallreduce");
    finish(call, b);
    divide(b.out.data(), count, t, r.divide_by);
    std::memcpy(out, b.out.data(), b.out.size());
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, dtype t, engine_reduction r) {
    const char* call = "mpi_engine::reduce_scatter";
    detail::check_engine_reduction(r, call);
    start(call, count * static_cast<std::size_t>(size_));
    const std::size_t bytes = count * size_of(t);
    if (device_memory()) {
      undivided(call, r);
      if (static_cast<const std::byte*>(in) + static_cast<std::size_t>(rank_) * bytes == out)
        detail::throw_invalid(call,
                              "on device memory, in and out are distinct (MPI_IN_PLACE's reduce-scatter "
                              "keeps the result at the front)");
      return blocking(call, [=, c = comm()] {
        return MPI_Reduce_scatter_block(in, out, as_int(count), type_of(t), op_of(t, r.k), c);
      });
    }
    auto& b = next(bytes * static_cast<std::size_t>(size_), bytes);
    std::memcpy(b.in.data(), in, b.in.size());
    check(MPI_Ireduce_scatter_block(b.in.data(), b.out.data(), as_int(count), type_of(t), op_of(t, r.k),
                                    comm(), &b.req),
          "MPI_Ireduce_scatter_block");
    finish(call, b);
    divide(b.out.data(), count, t, r.divide_by);
    std::memcpy(out, b.out.data(), bytes);
  }

  void all_gather(const void* in, void* out, std::size_t bytes) {
    const char* call = "mpi_engine::all_gather";
    start(call, bytes * static_cast<std::size_t>(size_));
    if (device_memory()) {
      const bool in_place =
          static_cast<const std::byte*>(out) + static_cast<std::size_t>(rank_) * bytes == in;
      return blocking(call, [=, c = comm()] {
        return MPI_Allgather(in_place ? MPI_IN_PLACE : in, as_int(bytes), MPI_BYTE, out, as_int(bytes),
                             MPI_BYTE, c);
      });
    }
    auto& b = next(bytes, bytes * static_cast<std::size_t>(size_));
    std::memcpy(b.in.data(), in, bytes);
    check(MPI_Iallgather(b.in.data(), as_int(bytes), MPI_BYTE, b.out.data(), as_int(bytes), MPI_BYTE, comm(),
                         &b.req),
          "MPI_Iallgather");
    finish(call, b);
    std::memcpy(out, b.out.data(), b.out.size());
  }

  void broadcast(const void* in, void* out, std::size_t bytes, int root) {
    const char* call = "mpi_engine::broadcast";
    detail::check_root(call, root, size_);
    start(call, bytes);
    if (device_memory()) // the root broadcasts from in (MPI only reads it there), then copies it to out
      return blocking(call, [=, c = comm(), me = rank_] {
        void* from = me == root ? const_cast<void*>(in) : out;
        int rc = MPI_Bcast(from, as_int(bytes), MPI_BYTE, root, c);
        if (rc == MPI_SUCCESS && me == root && in != out)
          rc = MPI_Sendrecv(in, as_int(bytes), MPI_BYTE, me, 0, out, as_int(bytes), MPI_BYTE, me, 0, c,
                            MPI_STATUS_IGNORE);
        return rc;
      });
    auto& b = next(0, bytes);
    if (rank_ == root) std::memcpy(b.out.data(), in, bytes);
    check(MPI_Ibcast(b.out.data(), as_int(bytes), MPI_BYTE, root, comm(), &b.req), "MPI_Ibcast");
    finish(call, b);
    std::memcpy(out, b.out.data(), bytes);
  }

  void reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r, int root) {
    const char* call = "mpi_engine::reduce";
    detail::check_engine_reduction(r, call);
    detail::check_root(call, root, size_);
    start(call, count);
    const std::size_t bytes = count * size_of(t);
    if (device_memory()) {
      undivided(call, r);
      const bool mine = rank_ == root;
      return blocking(call, [=, c = comm()] {
        return MPI_Reduce(mine && in == out ? MPI_IN_PLACE : in, mine ? out : nullptr, as_int(count),
                          type_of(t), op_of(t, r.k), root, c);
      });
    }
    auto& b = next(bytes, rank_ == root ? bytes : 0);
    std::memcpy(b.in.data(), in, bytes);
    check(MPI_Ireduce(b.in.data(), rank_ == root ? b.out.data() : nullptr, as_int(count), type_of(t),
                      op_of(t, r.k), root, comm(), &b.req),
          "MPI_Ireduce");
    finish(call, b);
    if (rank_ != root) return;
    divide(b.out.data(), count, t, r.divide_by);
    std::memcpy(out, b.out.data(), bytes);
  }

  void all_to_all(const void* in, void* out, std::size_t bytes) {
    const char* call = "mpi_engine::all_to_all";
    const std::size_t all = bytes * static_cast<std::size_t>(size_);
    start(call, all);
    if (device_memory())
      return blocking(call, [=, c = comm()] {
        return MPI_Alltoall(in, as_int(bytes), MPI_BYTE, out, as_int(bytes), MPI_BYTE, c);
      });
    auto& b = next(all, all);
    std::memcpy(b.in.data(), in, all);
    check(MPI_Ialltoall(b.in.data(), as_int(bytes), MPI_BYTE, b.out.data(), as_int(bytes), MPI_BYTE, comm(),
                        &b.req),
          "MPI_Ialltoall");
    finish(call, b);
    std::memcpy(out, b.out.data(), all);
  }

private:
  /// The thread that runs a device-memory call's blocking MPI collective while the caller waits
  /// against the bound. Shared with that thread: after a timeout the engine may go while the
  /// thread is still inside MPI.
  class blocking_runner {
  public:
    /// The runner and its thread, which holds it too: a thread left inside MPI outlives the engine.
    static std::shared_ptr<blocking_runner> make() {
      auto r = std::make_shared<blocking_runner>();
      r->thread_ = std::thread([r] { r->serve(); });
      return r;
    }
    /// Runs job on the thread; true with its MPI return code, or false once `timeout` passed
    /// (the job still running).
    bool run(std::function<int()> job, std::chrono::milliseconds timeout, int& rc) {
      std::unique_lock lock(m_);
      job_ = std::move(job), done_ = false;
      cv_.notify_all();
      if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
        stuck_ = true;
        return false;
      }
      rc = rc_;
      return true;
    }
    /// Ends the thread; one still inside MPI (a timed-out call) is left to finish on its own.
    void stop() {
      bool stuck = false;
      {
        std::lock_guard lock(m_);
        stop_ = true, stuck = stuck_;
        cv_.notify_all();
      }
      if (stuck)
        thread_.detach();
      else
        thread_.join();
    }

  private:
    void serve() {
      std::unique_lock lock(m_);
      for (;;) {
        cv_.wait(lock, [&] { return stop_ || job_; });
        if (!job_) return;
        auto job = std::move(job_);
        job_ = nullptr;
        lock.unlock();
        const int rc = job();
        lock.lock();
        rc_ = rc, done_ = true;
        cv_.notify_all();
        if (stop_) return;
      }
    }
    std::mutex m_;
    std::condition_variable cv_;
    std::function<int()> job_;
    int rc_ = MPI_SUCCESS;
    bool done_ = false, stop_ = false, stuck_ = false;
    std::thread thread_;
  };
  /// The engine's hold on its runner: stops it when the engine goes (or is moved over).
  struct runner_owner {
    std::shared_ptr<blocking_runner> p;
    runner_owner() = default;
    explicit runner_owner(std::shared_ptr<blocking_runner> r) : p(std::move(r)) {}
    runner_owner(runner_owner&& o) noexcept : p(std::move(o.p)) {}
    runner_owner& operator=(runner_owner&& o) noexcept {
      if (this != &o) release(), p = std::move(o.p);
      return *this;
    }
    ~runner_owner() { release(); }
    void release() {
      if (p) p->stop(), p.reset();
    }
  };

  /// The memory the engine takes: `m`, or for mpi_memory::library the environment's word, else
  /// the library's. Device memory needs the engine's thread to call MPI (MPI_THREAD_SERIALIZED).
  static bool resolve(mpi_memory m) {
    bool device = m == mpi_memory::device;
    if (m == mpi_memory::library) {
      const char* e = std::getenv("ARK_MPI_DEVICE_MEMORY");
      if (e && std::string(e) != "0" && std::string(e) != "1")
        detail::throw_invalid("mpi_engine", std::string("ARK_MPI_DEVICE_MEMORY is '") + e +
                                                "': 1 (GPU memory to MPI), 0 (staged through host memory), "
                                                "or unset (as the MPI library says)");
      device = e ? std::string(e) == "1" : detail::mpi_says_device_memory();
    }
    if (!device) return false;
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED)
      detail::throw_invalid("mpi_engine",
                            "device memory needs MPI initialized with MPI_THREAD_SERIALIZED or "
                            "more (MPI_Init_thread): each call runs on the engine's thread, so that "
                            "its wait stays bounded; or use host memory (ARK_MPI_DEVICE_MEMORY=0)");
    return true;
  }
  /// On device memory the caller divides an average.
  static void undivided(const char* call, engine_reduction r) {
    if (r.divide_by > 1)
      detail::throw_invalid(call,
                            "on device memory the engine does not divide: divide_by must be 1 (the caller "
                            "divides the sum)");
  }
  /// Runs a device-memory call's blocking collective on the engine's thread, within the bound.
  void blocking(const char* call, std::function<int()> job) {
    int rc = MPI_SUCCESS;
    // the job holds the MPI communicator: a job left inside MPI keeps it from MPI_Comm_free
    if (!runner_.p->run([job = std::move(job), keep = comm_] { return job(); }, timeout_, rc)) {
      abandoned_ = true; // the thread stays inside MPI with the caller's buffers
      timed_out(call);
    }
    check(rc, call);
  }

  /// A request and the memory MPI reads and writes until it completes.
  struct request {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<std::byte> in, out;
  };

  MPI_Comm comm() const { return *comm_; }

  /// Refuses a call after a timeout, and counts MPI cannot take (it counts in int).
  void start(const char* call, std::size_t elements) const {
    if (abandoned_)
      detail::throw_invalid(call,
                            "an earlier call timed out: its request is still posted on the engine's MPI "
                            "communicator, which is unusable");
    if (elements > static_cast<std::size_t>(INT_MAX))
      detail::throw_invalid(call, std::to_string(elements) + " elements is more than MPI counts (INT_MAX)");
  }
  static int as_int(std::size_t n) { return static_cast<int>(n); }

  /// The staging of the next request, sized.
  request& next(std::size_t in_bytes, std::size_t out_bytes) {
    if (!staging_) staging_ = std::make_unique<request>();
    staging_->in.resize(in_bytes);
    staging_->out.resize(out_bytes);
    return *staging_;
  }
  /// Polls the request to its end or the bound (detail::mpi_test_until); on timeout, MPI keeps
  /// the staging for good.
  void finish(const char* call, request& b) {
    if (detail::mpi_test_until(b.req, timeout_, "mpi_engine")) return;
    abandoned_ = true;
    (void)staging_.release(); // MPI may still write into it: it is left to MPI
    timed_out(call);
  }

  [[noreturn]] void timed_out(const char* call) const {
    throw timeout_error(std::string(call) + ": node " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + " waited " + std::to_string(timeout_.count()) +
                            " ms for the other nodes of its rail",
                        {});
  }
  static void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw platform_error(std::string("mpi_engine: ") + call + " failed");
  }

  static void divide(std::byte* p, std::size_t count, dtype t, std::uint32_t by) {
    if (by <= 1) return;
    with_dtype(t, [&](auto e) {
      using T = decltype(e);
      T* v = reinterpret_cast<T*>(p);
      const T* src[] = {v};
      detail::reduce_on_host<T>(src, 1, v, count, engine_reduction{op::dynamic::kind::sum, by});
    });
  }

  static MPI_Datatype type_of(dtype t) {
    switch (t) {
    case dtype::f32:
      return MPI_FLOAT;
    case dtype::f64:
      return MPI_DOUBLE;
    case dtype::i32:
      return MPI_INT32_T;
    case dtype::i64:
      return MPI_INT64_T;
    case dtype::u8:
      return MPI_UINT8_T;
    case dtype::i8:
      return MPI_INT8_T;
    default: // f16, bf16: 16 bits that the engine's own ops read
      return MPI_UINT16_T;
    }
  }
  /// MPI's op, or for the 16-bit floats one of the engine's (made once per process).
  static MPI_Op op_of(dtype t, op::dynamic::kind k) {
    using K = op::dynamic::kind;
    if (t == dtype::f16 || t == dtype::bf16) {
      static const auto ops = [] {
        struct table {
          MPI_Op f16[4], bf16[4];
        } m;
        make_half_ops<fp16>(m.f16);
        make_half_ops<bf16>(m.bf16);
        return m;
      }();
      const int i = k == K::prod ? 1 : k == K::min ? 2 : k == K::max ? 3 : 0;
      return t == dtype::f16 ? ops.f16[i] : ops.bf16[i];
    }
    return k == K::prod ? MPI_PROD : k == K::min ? MPI_MIN : k == K::max ? MPI_MAX : MPI_SUM;
  }
  template <class H>
  static void make_half_ops(MPI_Op* out) {
    MPI_Op_create(&half_op<H, op::dynamic::kind::sum>, 1, &out[0]);
    MPI_Op_create(&half_op<H, op::dynamic::kind::prod>, 1, &out[1]);
    MPI_Op_create(&half_op<H, op::dynamic::kind::min>, 1, &out[2]);
    MPI_Op_create(&half_op<H, op::dynamic::kind::max>, 1, &out[3]);
  }
  /// inout[i] = in[i] (op) inout[i], in float.
  template <class H, op::dynamic::kind K>
  static void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const op::dynamic f{K};
    const H* a = static_cast<const H*>(in);
    H* b = static_cast<H*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = from_acc<H>(f(to_acc(a[i]), to_acc(b[i])));
  }

  std::shared_ptr<MPI_Comm> comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<request> staging_; ///< host memory: the engine's buffers
  runner_owner runner_;              ///< device memory: the engine's thread (else none)
  bool abandoned_ = false;
};

static_assert(internode_engine<mpi_engine>);

} // namespace ark
