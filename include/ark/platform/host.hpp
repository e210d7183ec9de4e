// ark/platform/host.hpp: the host platform, where each rank is a CPU thread (plus helper threads
// for its workers). It is ark's test substrate without a GPU and the default when none is present.
//
// Peer-visible memory is ordinary memory shared by the threads of one process; atomics are
// std::atomic_ref at sequentially consistent or acquire/release order; a launch runs the work on
// a pool of threads that the rank's stream owns, each worker's threads a host_team
// (platform/host_team.hpp), and returns when all of them are done.
#pragma once

#include "ark/concepts/device.hpp"
#include "ark/core/error.hpp"
#include "ark/platform/host_team.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <unistd.h>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ark {

/// The host's "stream": an ordered executor owning the helper threads of one rank.
/// launch() runs the work on the calling thread and on helpers, and returns when all are done.
class host_stream {
public:
  host_stream() = default;
  host_stream(const host_stream&) = delete;
  host_stream& operator=(const host_stream&) = delete;
  ~host_stream() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : helpers_) t.join();
  }

  template <class F>
  void run(launch_shape shape, const F& work) {
    const unsigned total = shape.workers * shape.threads;
    barriers_.reset(new host_barrier[shape.workers]);
    for (unsigned w = 0; w < shape.workers; ++w) barriers_[w].reset(shape.threads);
    struct bound {
      const F* work;
      host_barrier* bars;
      launch_shape shape;
    } b{&work, barriers_.get(), shape};
    auto invoke = [](const void* p, unsigned tid) {
      const bound& b = *static_cast<const bound*>(p);
      const unsigned w = tid / b.shape.threads;
      host_team g(&b.bars[w], tid % b.shape.threads, b.shape.threads);
      (*b.work)(g, w, b.shape.workers);
    };
    grow(total);
    job_ = job{&b, invoke, total, shape.threads};
    done_.store(0);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    run_one(0);
    const unsigned expected = static_cast<unsigned>(helpers_.size());
    for (unsigned d; (d = done_.load(std::memory_order_acquire)) != expected;) done_.wait(d);
    if (error_) std::rethrow_exception(error_);
  }

private:
  struct job {
    const void* bound;
    void (*invoke)(const void*, unsigned);
    unsigned threads;
    unsigned team_threads; // threads of one worker
  };

  /// Spawns helpers until there are total - 1 of them (the caller is thread 0).
  void grow(unsigned total) {
    if (helpers_.size() + 1 >= total) return;
    std::vector<std::thread> all;
    all.reserve(total - 1);
    for (auto& t : helpers_) all.push_back(std::move(t));
    const std::uint64_t now = generation_.load(); // new helpers wait for the next launch
    for (unsigned tid = static_cast<unsigned>(all.size()) + 1; tid < total; ++tid)
      all.push_back(std::thread([this, tid, now] { helper(tid, now); }));
    helpers_.swap(all);
  }

  void run_one(unsigned tid) {
    if (tid >= job_.threads) return;
    try {
      job_.invoke(job_.bound, tid);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      // this thread never arrives again: its team's barrier would wait for it for ever
      barriers_[tid / job_.team_threads].break_for_good();
    }
  }

  void helper(unsigned tid, std::uint64_t seen) {
    for (;;) {
      std::uint64_t g;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) generation_.wait(seen);
      seen = g;
      if (stop_.load()) return;
      run_one(tid);
      done_.fetch_add(1, std::memory_order_acq_rel);
      done_.notify_all();
    }
  }

  std::vector<std::thread> helpers_;
  std::unique_ptr<host_barrier[]> barriers_;
  job job_{};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<unsigned> done_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

namespace detail::host_impl {
inline std::uint64_t load(const std::uint64_t* p, std::memory_order o) {
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(p)).load(o);
}
inline void store(std::uint64_t* p, std::uint64_t v, std::memory_order o) {
  std::atomic_ref<std::uint64_t>(*p).store(v, o);
}
inline std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
  return std::atomic_ref<std::uint64_t>(*p).fetch_add(v, std::memory_order_acq_rel);
}
inline bool compare_exchange(std::uint32_t* p, std::uint32_t expected, std::uint32_t desired) {
  return std::atomic_ref<std::uint32_t>(*p).compare_exchange_strong(expected, desired,
                                                                    std::memory_order_acq_rel);
}
inline void fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
inline void pause(unsigned spins) {
  if (spins < 16) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  } else if (spins < 2048) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}
template <std::size_t V>
vec<V> load_vec(const void* p) {
  vec<V> v;
  std::memcpy(&v, p, V);
  return v;
}
template <std::size_t V>
void store_vec(void* p, const vec<V>& v) {
  std::memcpy(p, &v, V);
}
} // namespace detail::host_impl

namespace platform {

struct host {
  static constexpr const char* name = "host";
  static constexpr bool synchronous_launch = true;
  using stream = host_stream*;
  /// engine_path::device_graphs runs here as its model: a launcher thread and a copy pool.
  static constexpr bool device_graph_launch = true;

  struct memory {
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
  };
  struct ipc_handle {
    std::uintptr_t address;
  };
  struct control_memory {
    void* host_ptr = nullptr;
    void* device_ptr = nullptr;
  };

  // Sections 1-4 are callable from generic host/device code (ARK_HD) so that nvcc and hipcc accept
  // algorithms instantiated for the host platform; they run on the host only.
  // 1. atomics ---------------------------------------------------------------------------------
  ARK_HD static std::uint64_t load_acquire(const std::uint64_t* p) {
    ARK_HOST_ONLY(return detail::host_impl::load(p, std::memory_order_acquire));
  }
  ARK_HD static std::uint64_t load_relaxed(const std::uint64_t* p) {
    ARK_HOST_ONLY(return detail::host_impl::load(p, std::memory_order_relaxed));
  }
  ARK_HD static std::uint32_t load_relaxed(const std::uint32_t* p) {
    ARK_HOST_ONLY(return std::atomic_ref<std::uint32_t>(*const_cast<std::uint32_t*>(p))
                      .load(std::memory_order_relaxed));
  }
  ARK_HD static void store_release(std::uint64_t* p, std::uint64_t v) {
    ARK_HOST_ONLY(detail::host_impl::store(p, v, std::memory_order_release));
  }
  ARK_HD static void store_release(std::uint32_t* p, std::uint32_t v) {
    ARK_HOST_ONLY(std::atomic_ref<std::uint32_t>(*p).store(v, std::memory_order_release));
  }
  ARK_HD static void store_relaxed(std::uint64_t* p, std::uint64_t v) {
    ARK_HOST_ONLY(detail::host_impl::store(p, v, std::memory_order_relaxed));
  }
  /// A release: the C++ model needs it to order the earlier reads (and costs nothing on x86).
  ARK_HD static void store_after_reads(std::uint64_t* p, std::uint64_t v) {
    ARK_HOST_ONLY(detail::host_impl::store(p, v, std::memory_order_release));
  }
  /// An acquire, the C++ model's way to order later writes (free on x86).
  ARK_HD static std::uint64_t load_before_writes(const std::uint64_t* p) {
    ARK_HOST_ONLY(return detail::host_impl::load(p, std::memory_order_acquire));
  }
  ARK_HD static std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) {
    ARK_HOST_ONLY(return detail::host_impl::fetch_add(p, v));
  }
  ARK_HD static bool compare_exchange(std::uint32_t* p, std::uint32_t expected, std::uint32_t desired) {
    ARK_HOST_ONLY(return detail::host_impl::compare_exchange(p, expected, desired));
  }
  ARK_HD static void fence() { ARK_HOST_ONLY(detail::host_impl::fence()); }

  // 2. clock -----------------------------------------------------------------------------------
  ARK_HD static std::uint64_t now_ns() { ARK_HOST_ONLY(return detail::host_impl::now_ns()); }
  /// Ranks may outnumber cores: spin briefly, then yield, then sleep a little.
  ARK_HD static void pause(unsigned spins) { ARK_HOST_ONLY(detail::host_impl::pause(spins)); }

  // 3. vectors ---------------------------------------------------------------------------------
  template <std::size_t V>
  ARK_HD static vec<V> load(const void* p) {
    ARK_HOST_ONLY(return detail::host_impl::load_vec<V>(p));
  }
  /// Peers' data is read after acquiring their flag; on the host an ordinary load suffices.
  template <std::size_t V>
  ARK_HD static vec<V> load_peer(const void* p) {
    ARK_HOST_ONLY(return detail::host_impl::load_vec<V>(p));
  }
  template <std::size_t V>
  ARK_HD static void store(void* p, const vec<V>& v) {
    ARK_HOST_ONLY(detail::host_impl::store_vec<V>(p, v));
  }

  // 4. LL packets ------------------------------------------------------------------------------
  // Release and acquire (free on x86): a packet then also orders its sender's earlier reads
  // before the receiver's later writes, as implied credits need (context::exchanged).
  ARK_HD static void store_ll(std::uint64_t* p, std::uint64_t a, std::uint64_t b) {
    ARK_HOST_ONLY(detail::host_impl::store(p, a, std::memory_order_release);
                  detail::host_impl::store(p + 1, b, std::memory_order_release));
  }
  ARK_HD static void load_ll(const std::uint64_t* p, std::uint64_t& a, std::uint64_t& b) {
    ARK_HOST_ONLY(a = detail::host_impl::load(p, std::memory_order_acquire);
                  b = detail::host_impl::load(p + 1, std::memory_order_acquire));
  }

  // 5. memory ----------------------------------------------------------------------------------
  /// One device, this process's memory, which every rank thread shares (a program that places
  /// rank r on device r % device_count() runs unchanged here).
  static int device_count() { return 1; }
  static memory allocate(std::size_t bytes, int /*device*/) {
    if (bytes == 0) return {};
    const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, rounded);
    if (!p) throw platform_error("host: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, rounded);
    return {static_cast<std::byte*>(p), bytes};
  }
  /// Bytes of physical memory free now (0 if the system cannot tell).
  static std::size_t free_memory(int /*device*/) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
  }
  static void release(memory& m) {
    std::free(m.ptr);
    m = {};
  }
  /// Ranks of the host platform share one address space: a handle is the address itself.
  static ipc_handle export_handle(const memory& m) { return {reinterpret_cast<std::uintptr_t>(m.ptr)}; }
  static void* import_handle(const ipc_handle& h, int /*device*/) {
    return reinterpret_cast<void*>(h.address);
  }
  static void close_import(void*) {}

  static control_memory allocate_control(std::size_t bytes) {
    memory m = allocate(bytes, 0);
    return {m.ptr, m.ptr};
  }
  static void release_control(control_memory& c) {
    std::free(c.host_ptr);
    c = {};
  }

  // nothing to do for 0 bytes, whatever the pointers (memset and memcpy may not take null ones)
  static void zero(void* p, std::size_t bytes) {
    if (bytes) std::memset(p, 0, bytes);
  }
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  // 6. execution -------------------------------------------------------------------------------
  static stream create_stream(int /*device*/, int /*priority*/ = 0) { return new host_stream(); }
  static void destroy_stream(stream s) { delete s; }
  static void synchronize(stream) {} // launches are synchronous
  struct event {};
  static event create_event(int /*device*/) { return {}; }
  static void destroy_event(event) {}
  static void order_after(stream, stream, event) {} // every stream's work is done when enqueued
  /// A copy "on" a stream: done when it returns, as every launch here is.
  static void copy_async(void* dst, const void* src, std::size_t bytes, stream) { copy(dst, src, bytes); }
  template <class F>
  static void launch(stream s, launch_shape shape, const F& work) {
    s->run(shape, work);
  }
};

static_assert(device<host> && !async_device<host> && !shared_device<host>);

} // namespace platform
} // namespace ark
