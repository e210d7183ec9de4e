// apps/nccl/core.hpp: NCCL's API over ark's public API, written once over the platform concept.
// apps/nccl/nccl.cu instantiates it on CUDA and exports NCCL's C functions from it (a
// libnccl.so.2 that programs load in place of NCCL's); tests/nccl/ instantiates it on the host
// platform, where each rank is a thread, and checks its logic without a GPU.
//
// What it keeps of NCCL's semantics, and how:
// - The unique id names a rendezvous (a Unix socket path, so one machine's processes and threads):
//   rank 0 listens there, the others connect. The communicator takes one bootstrap; the shim keeps
//   a second one of its own (splits, the real NCCL's id for forwarded calls).
// - A group (ncclGroupStart/End) defers what it holds to its end: inits (run at once, a thread
//   each when several, since each waits for its peers), then each communicator's operations, a
//   bucket per (communicator, stream) in one ark group: its sends and receives in one launch
//   that cannot deadlock on their order, its collectives in call order, like ones batched into
//   one launch (communicator::group_start). Where launches run the work
//   before returning (the host platform), buckets run a thread each, as ranks do.
// - Every call returns at once with its work enqueued on the caller's stream; errors are NCCL's
//   codes with a text that ncclGetLastError gives (this thread's last).
// - Destroy and abort hand the ark communicator to a thread that tears it down: ark's teardown
//   waits (bounded) for every rank, and one thread may destroy every rank's communicator in turn.
#pragma once

#include "ark/ark.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace ark::nccl {

// -- NCCL's values (nccl.h 2.28; apps/nccl/nccl.cu checks each against the header) -------------
enum class result : int {
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
  in_progress = 7,
};
enum class data_type : int { i8, u8, i32, u32, i64, u64, f16, f32, f64, bf16, f8e4m3, f8e5m2, count };
enum class scalar_residence : int { device = 0, host_immediate = 1 };
inline constexpr int builtin_op_count = 5; ///< ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg
inline constexpr int max_user_ops = 1 << 16;
inline constexpr int split_nocolor = -1;
/// The NCCL release whose API this is: programs gate features (bf16, avg, PreMulSum, async
/// errors) on ncclGetVersion.
inline constexpr int version_code = 22809;
inline constexpr std::size_t id_bytes = 128;
struct unique_id {
  char internal[id_bytes];
};

inline const char* error_string(result r) {
  switch (r) {
  case result::success:
    return "no error";
  case result::unhandled_cuda_error:
    return "unhandled cuda error (run with ARK_NCCL_DEBUG=INFO for details)";
  case result::system_error:
    return "unhandled system error (run with ARK_NCCL_DEBUG=INFO for details)";
  case result::internal_error:
    return "internal error - please report this issue to the ark developers";
  case result::invalid_argument:
    return "invalid argument (run with ARK_NCCL_DEBUG=WARN for details)";
  case result::invalid_usage:
    return "invalid usage (run with ARK_NCCL_DEBUG=WARN for details)";
  case result::remote_error:
    return "remote process exited or there was a network error";
  case result::in_progress:
    return "NCCL operation in progress";
  }
  return "unknown result code";
}

inline std::size_t size_of(data_type t) {
  constexpr std::size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[static_cast<int>(t)];
}
inline const char* name_of(data_type t) {
  constexpr const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                   "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return names[static_cast<int>(t)];
}
inline bool valid(data_type t) { return static_cast<int>(t) >= 0 && t < data_type::count; }

/// The ark element type a reduction of NCCL type `t` with op `k` runs in, if ark serves it.
/// ark's own types serve every op. The unsigned 32- and 64-bit integers sum and multiply bit for
/// bit as ark's signed type of their width (two's complement wrap-around), but compare, divide
/// and scale differently: those ops, and the 8-bit floats, ark does not serve.
inline std::optional<ark::dtype> reduced_as(data_type t, op::dynamic::kind k) {
  const bool wraps = k == op::dynamic::kind::sum || k == op::dynamic::kind::prod;
  switch (t) {
  case data_type::i8:
    return ark::dtype::i8;
  case data_type::u8:
    return ark::dtype::u8;
  case data_type::i32:
    return ark::dtype::i32;
  case data_type::i64:
    return ark::dtype::i64;
  case data_type::f16:
    return ark::dtype::f16;
  case data_type::f32:
    return ark::dtype::f32;
  case data_type::f64:
    return ark::dtype::f64;
  case data_type::bf16:
    return ark::dtype::bf16;
  case data_type::u32:
    return wraps ? std::optional(ark::dtype::i32) : std::nullopt;
  case data_type::u64:
    return wraps ? std::optional(ark::dtype::i64) : std::nullopt;
  default:
    return std::nullopt;
  }
}

// -- errors --------------------------------------------------------------------------------------
/// A failure the shim reports with an NCCL code (ark's own exceptions are mapped in guard()).
class failure : public std::runtime_error {
public:
  failure(result code, const std::string& what) : std::runtime_error(what), code_(code) {}
  result code() const { return code_; }

private:
  result code_;
};
[[noreturn]] inline void fail(result code, const std::string& call, const std::string& why) {
  throw failure(code, call + ": " + why);
}

/// Settings from the environment, NCCL's style with ARK_ names (docs/guide.md, "The NCCL API").
struct settings {
  bool fallback = true;          ///< ARK_NCCL_FALLBACK=0: never forward a call to NCCL
  std::string library;           ///< ARK_NCCL_LIBRARY: the real libnccl.so.2 to forward to
  int debug = 0;                 ///< ARK_NCCL_DEBUG: WARN (1) logs errors, INFO (2) each call's path too
  int max_ctas = -1;             ///< ARK_MAX_CTAS: the SM budget of each call (thread blocks)
  long timeout_ms = 0;           ///< ARK_TIMEOUT_MS: a wait on a peer fails after this long (0: ark's)
  long init_timeout_ms = 300000; ///< ARK_INIT_TIMEOUT_MS: how long ranks wait for each other at init
  std::string algo;              ///< ARK_ALGO: one_shot, two_shot, ring or direct (all-reduce and kin)
  std::string proto;             ///< ARK_PROTO: ll or simple
  bool early_launch = true;      ///< ARK_EARLY_LAUNCH=0: no early launch (config::early_launch)

  static settings from_env() {
    settings s;
    auto get = [](const char* n) -> const char* {
      const char* v = std::getenv(n);
      return v && *v ? v : nullptr;
    };
    if (const char* v = get("ARK_NCCL_FALLBACK")) s.fallback = std::string(v) != "0";
    if (const char* v = get("ARK_NCCL_LIBRARY")) s.library = v;
    if (const char* v = get("ARK_NCCL_DEBUG")) {
      const std::string d = v;
      s.debug = d == "INFO" || d == "TRACE" ? 2 : d == "WARN" ? 1 : 0;
    }
    if (const char* v = get("ARK_MAX_CTAS")) s.max_ctas = std::atoi(v);
    if (const char* v = get("ARK_TIMEOUT_MS")) s.timeout_ms = std::atol(v);
    if (const char* v = get("ARK_INIT_TIMEOUT_MS")) s.init_timeout_ms = std::atol(v);
    if (const char* v = get("ARK_ALGO")) s.algo = v;
    if (const char* v = get("ARK_PROTO")) s.proto = v;
    if (const char* v = get("ARK_EARLY_LAUNCH")) s.early_launch = std::string(v) != "0";
    return s;
  }
  static const settings& get() {
    static const settings s = from_env();
    return s;
  }
};

/// Writes the line made by `line()` at ARK_NCCL_DEBUG `level` or above (made only then: calls
/// log on every operation, whose cost the shim keeps near nothing).
template <class F>
void log(int level, F&& line) {
  if (settings::get().debug >= level)
    std::fprintf(stderr, "ark-nccl %d: %s\n", static_cast<int>(::getpid()), std::string(line()).c_str());
}

/// This thread's last error text (ncclGetLastError).
inline std::string& last_error_text() {
  thread_local std::string text;
  return text;
}

/// Runs f, mapping what it throws to NCCL's codes and keeping the text for ncclGetLastError.
template <class F>
result guard(const char* call, F&& f) {
  auto failed = [&](result r, const std::string& what) {
    last_error_text() = what;
    log(1, [&] { return std::string(call) + " failed: " + what; });
    return r;
  };
  try {
    f();
    return result::success;
  } catch (const failure& e) {
    return failed(e.code(), e.what());
  } catch (const ark::invalid_argument& e) {
    return failed(result::invalid_argument, e.what());
  } catch (const ark::mismatch_error& e) {
    return failed(result::invalid_usage, e.what());
  } catch (const ark::timeout_error& e) {
    return failed(result::remote_error, e.what());
  } catch (const ark::aborted_error& e) {
    return failed(result::remote_error, e.what());
  } catch (const ark::platform_error& e) {
    return failed(result::unhandled_cuda_error, e.what());
  } catch (const ark::error& e) {
    return failed(e.code() == errc::unsupported ? result::invalid_usage : result::internal_error, e.what());
  } catch (const std::bad_alloc&) {
    return failed(result::system_error, std::string(call) + ": out of host memory");
  } catch (const std::exception& e) {
    return failed(result::internal_error, std::string(call) + ": " + e.what());
  }
}

/// The NCCL code of an error ark recorded on a rank (ncclCommGetAsyncError).
inline result async_result(const error_record& e) {
  switch (static_cast<errc>(e.code)) {
  case errc::ok:
    return result::success;
  case errc::timeout:
  case errc::aborted:
    return result::remote_error;
  case errc::mismatch:
  case errc::unsupported:
  case errc::invalid_argument:
    return result::invalid_usage;
  case errc::platform:
    return result::unhandled_cuda_error;
  }
  return result::internal_error;
}

/// Refuses a value that is not one of NCCL's data types.
inline void check_type(data_type t, const char* call) {
  if (!valid(t))
    fail(result::invalid_argument, call,
         "datatype " + std::to_string(static_cast<int>(t)) + " is not an NCCL type");
}

// -- unique ids ----------------------------------------------------------------------------------
/// What a unique id holds: a tag, and the rendezvous path that rank 0 listens on.
struct id_body {
  char tag[8];
  char path[96];
};
static_assert(sizeof(id_body) <= id_bytes);
inline constexpr char id_tag[8] = {'a', 'r', 'k', '-', 'n', 'c', 'l', '1'};

/// The id naming rendezvous path `dir` + `name`.
inline unique_id id_at(const std::string& dir, const char* name) {
  unique_id id{};
  id_body b{};
  std::memcpy(b.tag, id_tag, sizeof id_tag);
  std::snprintf(b.path, sizeof b.path, "%s%s", dir.c_str(), name);
  std::memcpy(id.internal, &b, sizeof b);
  return id;
}

/// A fresh id: a path no other id names (random, under $TMPDIR if it is short enough, else /tmp).
inline unique_id make_id() {
  static std::mutex m;
  static std::mt19937_64 gen(std::random_device{}() ^ (std::uint64_t(::getpid()) << 32) ^
                             std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::uint64_t r;
  {
    std::lock_guard<std::mutex> lock(m);
    r = gen();
  }
  std::string dir = "/tmp";
  if (const char* t = std::getenv("TMPDIR"); t && *t && std::strlen(t) < 48) dir = t;
  char name[40];
  std::snprintf(name, sizeof name, "/arknccl-%016llx", static_cast<unsigned long long>(r));
  return id_at(dir, name);
}

/// The rendezvous path of an id; refuses ids this library did not make.
inline std::string path_of(const unique_id& id, const char* call) {
  id_body b;
  std::memcpy(&b, id.internal, sizeof b);
  if (std::memcmp(b.tag, id_tag, sizeof id_tag) != 0 || !std::memchr(b.path, 0, sizeof b.path) ||
      b.path[0] != '/')
    fail(result::invalid_argument, call,
         "the unique id was not made by ncclGetUniqueId of this library (ark's NCCL API): every rank must "
         "load the same library");
  return b.path;
}

/// The id of a communicator split off one (every member derives the same one).
inline unique_id derived_id(const std::string& parent, std::uint64_t split, int color) {
  std::uint64_t h = 1469598103934665603ull; // FNV-1a over the parent's path, the split, the color
  auto mix = [&h](const void* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  mix(parent.data(), parent.size());
  mix(&split, sizeof split);
  mix(&color, sizeof color);
  char name[40];
  std::snprintf(name, sizeof name, "/arknccl-%016llx", static_cast<unsigned long long>(h));
  return id_at(parent.substr(0, parent.rfind('/')), name);
}

// -- communicators -------------------------------------------------------------------------------
/// What the shim takes from ncclConfig_t (nccl.cu reads it, whatever its version).
struct comm_config {
  bool blocking = true;
  int max_ctas = -1; ///< maxCTAs: the SM budget of each call
  std::string name;  ///< commName, for logs
};

/// The platform's current device (the GPU a communicator of this thread uses).
template <device P>
int current_device() {
  if constexpr (requires { P::current_device(); })
    return P::current_device();
  else
    return 0;
}
template <device P>
void use_device(int d) {
  if constexpr (requires { P::use_device(d); }) P::use_device(d);
}

template <device P>
class comm;

/// Keeps the frees of a communicator's teardown off the shim's launches. CUDA's free waits for
/// the whole GPU and holds up the process's launches meanwhile: a free that lands between the
/// launches of one group's ranks (or while ranks of a closing communicator launch their barriers)
/// waits for a kernel that waits for a launch the free holds up, until that kernel's bounded wait
/// fails. Launches and closes enter, many at once; a free waits until none is inside, and none
/// enters while it runs. A free that waits holds nobody up, so launches are never blocked by one
/// that cannot finish. Ranks that launch one collective from several threads are not covered: a
/// free between their launches stalls them as it would NCCL's (docs/guide.md, "The NCCL API").
class launch_gate {
public:
  static launch_gate& get() {
    static launch_gate g;
    return g;
  }
  /// Holds frees off for its lifetime. Its fast path is an atomic add to a counter of this
  /// thread's own cache line and a load of a line that only frees write (it is on every call's
  /// path): ranks launching from several threads at once share no line that any of them writes.
  class inside {
  public:
    inside() : g_(get()), slot_(g_.mine()) {
      for (;;) {
        slot_.fetch_add(1); // seq_cst, as free's store and load: one of the two sees the other
        if (!g_.freeing_.load()) return;
        g_.leave(slot_); // a free runs or is trying: wait for its end, then enter again
        std::unique_lock<std::mutex> lock(g_.m_);
        g_.cv_.wait(lock, [&] { return !g_.freeing_.load(); });
      }
    }
    ~inside() { g_.leave(slot_); }
    inside(const inside&) = delete;
    inside& operator=(const inside&) = delete;

  private:
    launch_gate& g_;
    std::atomic<unsigned>& slot_;
  };
  /// Runs free() while nothing is inside. A free that finds a launch inside steps back at once
  /// and waits for the launches to leave, so a waiting free holds no launch up.
  template <class F>
  void alone(F&& free) {
    std::unique_lock<std::mutex> lock(m_);
    wanting_.fetch_add(1); // launches leaving wake this free
    for (;;) {
      cv_.wait(lock, [&] { return !freeing_.load() && nobody_inside(); });
      freeing_.store(true);
      if (nobody_inside()) break;
      freeing_.store(false); // a launch entered meanwhile: it goes first
      cv_.notify_all();
    }
    wanting_.fetch_sub(1);
    lock.unlock();
    free();
    lock.lock();
    freeing_.store(false);
    cv_.notify_all();
  }

private:
  /// Threads beyond `slots` share counters: still correct, only no longer free of contention.
  static constexpr unsigned slots = 64;
  struct alignas(64) slot {
    std::atomic<unsigned> n{0};
  };

  std::atomic<unsigned>& mine() {
    thread_local const unsigned index = next_.fetch_add(1, std::memory_order_relaxed) % slots;
    return inside_[index].n;
  }
  bool nobody_inside() const {
    for (const slot& s : inside_)
      if (s.n.load() != 0) return false;
    return true;
  }
  void leave(std::atomic<unsigned>& s) {
    s.fetch_sub(1);
    if (wanting_.load() > 0) {
      std::lock_guard<std::mutex> lock(m_); // a free waits for the launches to leave
      cv_.notify_all();
    }
  }

  slot inside_[slots];
  alignas(64) std::atomic<bool> freeing_{false};
  std::atomic<unsigned> wanting_{0}; ///< frees waiting in alone(); read on every leave, written by frees
  alignas(64) std::mutex m_;
  std::condition_variable cv_;
  std::atomic<unsigned> next_{0}; ///< the next thread's slot (written once a thread, off the hot line)
};

/// The communicators of this process live on each device, by unique id, from just before their
/// init to the end of their teardown's frees. Two of one id on one device are ranks sharing the
/// device's context: their kernels wait for each other's launches.
class live_ranks {
public:
  static live_ranks& get() {
    static live_ranks l;
    return l;
  }
  void add(int device, const std::string& id) {
    std::lock_guard<std::mutex> lock(m_);
    ++n_[{device, id}];
  }
  void remove(int device, const std::string& id) {
    std::lock_guard<std::mutex> lock(m_);
    const auto it = n_.find({device, id});
    if (it != n_.end() && --it->second == 0) n_.erase(it);
  }
  /// Whether ranks of one communicator share `device` here.
  bool shared(int device) {
    std::lock_guard<std::mutex> lock(m_);
    for (auto it = n_.lower_bound({device, std::string()}); it != n_.end() && it->first.first == device; ++it)
      if (it->second > 1) return true;
    return false;
  }

private:
  std::mutex m_;
  std::map<std::pair<int, std::string>, int> n_; // (device, id): one flat map (hipcc 15 crashes on
                                                 // a map of maps)
};

/// ncclMemAlloc's allocations (the platform's device memory, which ark can register). Where ranks
/// of this process share the allocation's device, ncclMemFree keeps it until they no longer do:
/// CUDA's free waits for every kernel on the device, a peer's collective among them, which may
/// wait for this rank's next launch, held up by the free until its bounded wait fails. Frees run
/// alone (launch_gate), as a teardown's do.
template <device P>
class allocations {
public:
  static allocations& get() {
    static allocations a;
    return a;
  }
  void* allocate(std::size_t bytes) {
    const int device = current_device<P>();
    typename P::memory m = P::allocate(bytes ? bytes : 1, device);
    std::lock_guard<std::mutex> lock(m_);
    void* p = m.ptr;
    held_.emplace(p, entry{m, device});
    return p;
  }
  /// Frees p now, or where ranks share its device, once they no longer do (free_kept).
  bool release(void* p) {
    entry e;
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = held_.find(p);
      if (it == held_.end()) return false;
      e = it->second;
      held_.erase(it);
      kept_.push_back(e);
    }
    free_kept(e.device);
    return true;
  }
  /// Frees what release kept on `device` unless ranks share it.
  void free_kept(int device) {
    std::vector<entry> now;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (live_ranks::get().shared(device)) return;
      const auto mine = std::stable_partition(kept_.begin(), kept_.end(),
                                              [&](const entry& e) { return e.device != device; });
      now.assign(mine, kept_.end());
      kept_.erase(mine, kept_.end());
    }
    if (!now.empty())
      launch_gate::get().alone([&] {
        for (auto& e : now) P::release(e.m);
      });
  }
  std::size_t kept() {
    std::lock_guard<std::mutex> lock(m_);
    return kept_.size();
  }

private:
  struct entry {
    typename P::memory m;
    int device = 0;
  };
  std::mutex m_;
  std::map<void*, entry> held_;
  std::vector<entry> kept_;
};

/// Tears down communicators on threads of their own (ark's teardown waits for every rank, and
/// one thread may destroy every rank's communicator in turn); joined at exit. The collective
/// half (close) runs inside the launch gate, the frees alone.
template <device P>
class reaper {
public:
  static reaper& get() {
    static reaper r;
    return r;
  }
  /// What the teardowns use is made first, so that it outlives the join at exit.
  reaper() {
    (void)live_ranks::get();
    (void)allocations<P>::get();
  }
  /// c, rank of communicator `id` on `device`: its collective half, then its frees.
  void take(std::unique_ptr<ark::communicator<P>> c, int device, std::string id) {
    std::lock_guard<std::mutex> lock(m_);
    threads_.emplace_back([c = std::move(c), device, id = std::move(id)]() mutable {
      use_device<P>(device);
      {
        launch_gate::inside closing;
        c->close();
      }
      launch_gate::get().alone([&] { c.reset(); });
      live_ranks::get().remove(device, id);
      allocations<P>::get().free_kept(device);
    });
  }
  /// Waits for every teardown handed over so far.
  void join() {
    std::vector<std::thread> t;
    {
      std::lock_guard<std::mutex> lock(m_);
      t.swap(threads_);
    }
    for (auto& x : t) x.join();
  }
  ~reaper() { join(); }

private:
  std::mutex m_;
  std::vector<std::thread> threads_;
};

/// One rank's communicator: ark's, the shim's own bootstrap, its user ops.
template <device P>
class comm {
public:
  comm(const unique_id& id, int world, int rank, const comm_config& cfg, int device, const char* call)
      : path_(path_of(id, call)), world_(world), rank_(rank), device_(device), cfg_(cfg),
        budget_(settings::get().max_ctas > 0 ? settings::get().max_ctas : cfg.max_ctas),
        logs_calls_(settings::get().debug >= 2) {
    if (world < 1 || world > ark::max_world)
      fail(result::invalid_argument, call,
           "nranks " + std::to_string(world) + " is outside [1, " + std::to_string(ark::max_world) + "]");
    if (rank < 0 || rank >= world)
      fail(result::invalid_argument, call,
           "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  }

  /// Collective over the id's ranks: builds ark's communicator.
  void init() {
    const settings& s = settings::get();
    use_device<P>(device_);
    const std::chrono::milliseconds wait(s.init_timeout_ms);
    side_.emplace(ark::unix_socket_bootstrap(path_ + ".s", rank_, world_, wait));
    typename ark::communicator<P>::config c;
    c.device = device_;
    if (s.timeout_ms > 0) c.timeout = std::chrono::milliseconds(s.timeout_ms);
    if (s.algo == "one_shot") c.tuning.one_shot_max_bytes = ~std::size_t(0);
    if (s.algo == "two_shot") c.tuning.one_shot_max_bytes = 0;
    if (s.algo == "ring") c.tuning.one_shot_max_bytes = 0, c.tuning.direct_max_world = 0;
    if (s.algo == "direct") c.tuning.direct_max_world = ark::max_world;
    if (s.proto == "ll") c.tuning.ll_max_bytes = ~std::size_t(0);
    if (s.proto == "simple") c.tuning.ll_max_bytes = 0;
    c.early_launch = s.early_launch;
    live_ranks::get().add(device_, path_); // before any peer can call: until the reaper's frees
    try {
      ark_ = std::make_unique<ark::communicator<P>>(
          ark::any_bootstrap(ark::unix_socket_bootstrap(path_ + ".c", rank_, world_, wait)), c);
    } catch (...) {
      live_ranks::get().remove(device_, path_);
      throw;
    }
    log(2, [&] {
      return "communicator " + (cfg_.name.empty() ? path_ : cfg_.name) + " rank " + std::to_string(rank_) +
             " of " + std::to_string(world_) + " on device " + std::to_string(device_) + " ready";
    });
  }

  ark::communicator<P>& ark(const char* call) {
    if (!ark_) fail(result::invalid_usage, call, "the communicator is not initialized (or was destroyed)");
    return *ark_;
  }
  bool ready() const { return ark_ != nullptr; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  const std::string& path() const { return path_; }
  ark::any_bootstrap& side() { return *side_; }

  /// Options of one call on stream s (null: the communicator's own).
  call_options<P> options(typename P::stream s) const {
    call_options<P> o;
    o.stream = s;
    if (budget_ > 0) o.max_ctas = budget_;
    return o;
  }
  /// Whether each call logs the path that served it (ARK_NCCL_DEBUG=INFO).
  bool logs_calls() const { return logs_calls_; }

  // user ops: ncclRedOpCreatePreMulSum's, numbered from builtin_op_count
  int add_op(const op::dynamic& d, data_type t) {
    std::lock_guard<std::mutex> lock(m_);
    for (std::size_t i = 0; i < ops_.size(); ++i)
      if (!ops_[i]) {
        ops_[i] = user_op{d, t};
        return builtin_op_count + static_cast<int>(i);
      }
    if (ops_.size() == max_user_ops)
      fail(result::invalid_usage, "ncclRedOpCreatePreMulSum", "too many user ops");
    ops_.push_back(user_op{d, t});
    return builtin_op_count + static_cast<int>(ops_.size() - 1);
  }
  void remove_op(int op, const char* call) {
    std::lock_guard<std::mutex> lock(m_);
    const int i = op - builtin_op_count;
    if (op < builtin_op_count || i >= static_cast<int>(ops_.size()) || !ops_[i])
      fail(result::invalid_argument, call,
           "op " + std::to_string(op) + " is not a user op of this communicator");
    ops_[i].reset();
  }
  /// The ark op of NCCL op `op` on data of type t.
  op::dynamic op_of(int op, data_type t, const char* call) {
    using K = op::dynamic::kind;
    static constexpr K builtin[] = {K::sum, K::prod, K::max, K::min, K::avg};
    if (op >= 0 && op < builtin_op_count) return op::dynamic{builtin[op]};
    std::lock_guard<std::mutex> lock(m_);
    const int i = op - builtin_op_count;
    if (op < 0 || i >= static_cast<int>(ops_.size()) || !ops_[i])
      fail(result::invalid_argument, call,
           "op " + std::to_string(op) + " is neither built in nor a user op of this communicator");
    if (ops_[i]->type != t)
      fail(result::invalid_argument, call,
           std::string("the user op was made for ") + name_of(ops_[i]->type) + ", the call reduces " +
               name_of(t));
    return ops_[i]->op;
  }

  /// Ends the communicator: its ark communicator is torn down on a thread of its own.
  void finish(bool abort) {
    if (!ark_) return;
    if (abort) ark_->abort();
    reaper<P>::get().take(std::move(ark_), device_, path_);
  }
  std::uint64_t next_split() { return splits_++; }

private:
  struct user_op {
    op::dynamic op;
    data_type type;
  };
  std::string path_;
  int world_, rank_, device_;
  comm_config cfg_;
  // read once from the settings, which are the process's and fixed at their first use: both are
  // on every call's path
  int budget_;      ///< each call's SM budget (ARK_MAX_CTAS, else the config's; 0 or less: none)
  bool logs_calls_; ///< ARK_NCCL_DEBUG=INFO
  std::optional<ark::any_bootstrap> side_;
  std::unique_ptr<ark::communicator<P>> ark_;
  std::mutex m_;
  std::vector<std::optional<user_op>> ops_;
  std::uint64_t splits_ = 0;
};

// -- groups --------------------------------------------------------------------------------------
/// What a group holds until its end (this thread's).
template <device P>
struct group {
  struct work {
    comm<P>* c;
    typename P::stream s;
    std::string call;
    std::function<void(ark::communicator<P>&)> run;
  };
  int depth = 0;
  std::vector<std::function<void()>> inits;
  std::vector<work> ops;
  static group& mine() {
    thread_local group g;
    return g;
  }
};

/// Runs jobs at once, a thread each when there are several (each may wait for the others'
/// peers); throws the first failure after every job ended.
inline void run_together(std::vector<std::function<void()>>& jobs) {
  std::vector<std::exception_ptr> errors(jobs.size());
  auto one = [&](std::size_t i) {
    try {
      jobs[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (jobs.size() == 1) {
    one(0);
  } else {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < jobs.size(); ++i) threads.emplace_back(one, i);
    for (auto& t : threads) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

/// Issues a bucket: one communicator's operations on one stream, in one ark group (its
/// collectives batched, its sends and receives in one launch).
template <device P>
void issue(std::vector<typename group<P>::work*>& bucket) {
  auto& a = bucket.front()->c->ark(bucket.front()->call.c_str());
  if (bucket.size() == 1) return bucket.front()->run(a);
  a.group_start();
  try {
    for (auto* w : bucket) w->run(a);
  } catch (...) {
    try {
      a.group_end();
    } catch (...) {
    }
    throw;
  }
  a.group_end();
}

template <device P>
result group_start() {
  ++group<P>::mine().depth;
  return result::success;
}

/// Ends this thread's group: its inits, then its operations (see the top of this file).
template <device P>
result group_end(const char* call = "ncclGroupEnd") {
  auto& g = group<P>::mine();
  if (g.depth == 0) {
    last_error_text() = std::string(call) + ": no ncclGroupStart is open";
    return result::invalid_usage;
  }
  if (--g.depth > 0) return result::success;
  auto inits = std::exchange(g.inits, {});
  auto ops = std::exchange(g.ops, {});
  return guard(call, [&] {
    if (!inits.empty()) run_together(inits);
    launch_gate::inside launching; // every rank's launch of the group before any teardown frees
    std::vector<std::vector<typename group<P>::work*>> buckets;
    for (auto& w : ops) {
      auto it = std::find_if(buckets.begin(), buckets.end(),
                             [&](const auto& b) { return b.front()->c == w.c && b.front()->s == w.s; });
      if (it == buckets.end())
        buckets.push_back({&w});
      else
        it->push_back(&w);
    }
    bool together = P::synchronous_launch && buckets.size() > 1;
    if (together) {
      std::vector<std::function<void()>> jobs;
      for (auto& b : buckets)
        jobs.push_back([&b, d = b.front()->c->device()] {
          use_device<P>(d);
          issue<P>(b);
        });
      run_together(jobs);
    } else {
      for (auto& b : buckets) issue<P>(b);
    }
  });
}

/// Drops this thread's group without running it (ncclGroupSimulateEnd).
template <device P>
result group_drop() {
  auto& g = group<P>::mine();
  if (g.depth == 0) {
    last_error_text() = "ncclGroupSimulateEnd: no ncclGroupStart is open";
    return result::invalid_usage;
  }
  if (--g.depth == 0) g.inits.clear(), g.ops.clear();
  return result::success;
}

/// Runs an operation now, or at the end of the open group.
template <device P, class F>
result submit(const char* call, comm<P>* c, typename P::stream s, F&& run) {
  auto& g = group<P>::mine();
  return guard(call, [&] {
    if (!c) fail(result::invalid_argument, call, "comm is NULL");
    if (g.depth > 0) {
      g.ops.push_back({c, s, call, std::forward<F>(run)});
      return;
    }
    launch_gate::inside launching;
    run(c->ark(call));
  });
}

// -- the API -------------------------------------------------------------------------------------
/// Initializes c now, or at the end of the open group (NCCL's way to set up several GPUs from one
/// thread: each rank inits at the end, together); hands it to *out either way.
template <device P>
void start(std::unique_ptr<comm<P>> c, comm<P>** out) {
  auto& g = group<P>::mine();
  if (g.depth > 0)
    g.inits.push_back([raw = c.get()] { raw->init(); });
  else
    c->init();
  *out = c.release();
}

template <device P>
result init_rank(comm<P>** out, int world, const unique_id& id, int rank, const comm_config& cfg,
                 const char* call = "ncclCommInitRank") {
  return guard(call, [&] {
    if (!out) fail(result::invalid_argument, call, "comm is NULL");
    *out = nullptr;
    start(std::make_unique<comm<P>>(id, world, rank, cfg, current_device<P>(), call), out);
  });
}

/// Every rank of a new id in this process, one per device (ncclCommInitAll).
template <device P>
result init_all(comm<P>** comms, int n, const int* devices) {
  const char* call = "ncclCommInitAll";
  return guard(call, [&] {
    if (!comms) fail(result::invalid_argument, call, "comms is NULL");
    if (n < 1) fail(result::invalid_argument, call, "ndev must be at least 1");
    const unique_id id = make_id();
    std::vector<std::unique_ptr<comm<P>>> made;
    std::vector<std::function<void()>> jobs;
    for (int r = 0; r < n; ++r) {
      const int d = devices ? devices[r] : r;
      made.push_back(std::make_unique<comm<P>>(id, n, r, comm_config{}, d, call));
      jobs.push_back([c = made.back().get()] { c->init(); });
    }
    run_together(jobs);
    for (int r = 0; r < n; ++r) comms[r] = made[r].release();
  });
}

/// ncclCommSplit: ranks of one color form a communicator, ordered by key then rank.
template <device P>
result split(comm<P>* parent, int color, int key, comm<P>** out, const comm_config& cfg,
             const char* call = "ncclCommSplit") {
  return guard(call, [&] {
    if (!parent) fail(result::invalid_argument, call, "comm is NULL");
    if (!out) fail(result::invalid_argument, call, "newcomm is NULL");
    if (color < split_nocolor)
      fail(result::invalid_argument, call,
           "color " + std::to_string(color) + " is negative (NCCL_SPLIT_NOCOLOR is -1)");
    *out = nullptr;
    parent->ark(call);
    struct entry {
      int color, key, rank;
    };
    std::vector<entry> all(parent->world());
    const entry mine{color, key, parent->rank()};
    parent->side().all_gather(&mine, all.data(), sizeof mine);
    const std::uint64_t n = parent->next_split();
    if (color == split_nocolor) return;
    std::vector<entry> members;
    for (const auto& e : all)
      if (e.color == color) members.push_back(e);
    std::stable_sort(members.begin(), members.end(), [](const entry& a, const entry& b) {
      return a.key != b.key ? a.key < b.key : a.rank < b.rank;
    });
    int new_rank = 0;
    while (members[new_rank].rank != parent->rank()) ++new_rank;
    start(std::make_unique<comm<P>>(derived_id(parent->path(), n, color), static_cast<int>(members.size()),
                                    new_rank, cfg, parent->device(), call),
          out);
  });
}

/// ncclCommShrink: the ranks not excluded, in their order.
template <device P>
result shrink(comm<P>* parent, const int* exclude, int n_exclude, comm<P>** out, const comm_config& cfg) {
  const char* call = "ncclCommShrink";
  if (n_exclude > 0 && !exclude) {
    last_error_text() = std::string(call) + ": excludeRanksList is NULL";
    return result::invalid_argument;
  }
  bool excluded = false;
  for (int i = 0; i < n_exclude && parent; ++i) excluded = excluded || exclude[i] == parent->rank();
  return split(parent, excluded ? split_nocolor : 0, parent ? parent->rank() : 0, out, cfg, call);
}

template <device P>
result destroy(comm<P>* c, bool abort) {
  if (!c) return result::success; // NCCL accepts a null communicator here
  c->finish(abort);
  delete c;
  return result::success;
}

/// ncclGetLastError(comm): this thread's last failure; when there is none, the asynchronous error
/// comm recorded (which rank and step waited for what), so a failed ncclCommGetAsyncError has a
/// reason to print.
template <device P>
const char* last_error(comm<P>* c) {
  const std::string& text = last_error_text();
  if (text.empty() && c && c->ready()) {
    const error_record e = c->ark("ncclGetLastError").last_error();
    thread_local std::string recorded;
    if (static_cast<errc>(e.code) != errc::ok) return (recorded = ark::describe(e, c->rank())).c_str();
  }
  return text.c_str();
}

template <device P>
result async_error(comm<P>* c, result* out) {
  return guard("ncclCommGetAsyncError", [&] {
    if (!c || !out) fail(result::invalid_argument, "ncclCommGetAsyncError", "comm or asyncError is NULL");
    *out = c->ready() ? async_result(c->ark("ncclCommGetAsyncError").last_error()) : result::success;
  });
}

template <device P>
result create_premul_sum(int* op, const void* scalar, data_type t, scalar_residence where, comm<P>* c) {
  const char* call = "ncclRedOpCreatePreMulSum";
  return guard(call, [&] {
    if (!op || !scalar || !c) fail(result::invalid_argument, call, "op, scalar or comm is NULL");
    check_type(t, call);
    const auto as = reduced_as(t, op::dynamic::kind::premul_sum);
    if (!as) fail(result::invalid_argument, call, std::string("ark does not scale ") + name_of(t));
    op::dynamic d{op::dynamic::kind::premul_sum};
    if (where == scalar_residence::device) {
      d.scale_at = scalar;
      d.scale_type = *as;
    } else {
      d.scale = ark::with_dtype(*as, [&](auto v) {
        using T = decltype(v);
        T x;
        std::memcpy(&x, scalar, sizeof x);
        return static_cast<double>(static_cast<acc_t<T>>(x));
      });
    }
    *op = c->add_op(d, t);
  });
}

/// A reduction's type and op resolved once: ark's op, and the ark type it runs in where ark
/// serves it (else the call is forwarded to NCCL where that is allowed and possible, or fails).
struct reduction_plan {
  op::dynamic op;
  std::optional<ark::dtype> as;
  data_type type{}; ///< the call's own type and op, for the log
  int nccl_op = 0;
};

/// Resolves the op and type of a reduction on c; throws failure for what no library serves (a
/// NULL comm, a type or op that is not NCCL's or not c's).
template <device P>
reduction_plan plan_reduction(comm<P>* c, data_type t, int op, const char* call) {
  if (!c) fail(result::invalid_argument, call, "comm is NULL");
  check_type(t, call);
  reduction_plan p{c->op_of(op, t, call), {}, t, op};
  p.as = reduced_as(t, p.op.k);
  return p;
}

/// A reduction ark serves (p.as is set), run now or at the group's end.
template <device P, class F>
result reduction(const char* call, comm<P>* c, const reduction_plan& p, typename P::stream s, F f) {
  assert(p.as.has_value());
  if (c->logs_calls())
    log(2, [&] {
      return std::string(call) + " " + name_of(p.type) + " op " + std::to_string(p.nccl_op) + ": ark";
    });
  return submit<P>(call, c, s, [=, d = p.op, as = *p.as](ark::communicator<P>& a) {
    ark::with_dtype(as, [&](auto e) { f(e, d, a, c->options(s)); });
  });
}

/// A reduction resolved now (errors returned by the call, as NCCL does), run now or at the
/// group's end; one that ark does not serve fails (forward.hpp forwards it first where it may).
template <device P, class F>
result reduction(const char* call, comm<P>* c, data_type t, int op, typename P::stream s, F f) {
  reduction_plan p;
  const result r = guard(call, [&] {
    p = plan_reduction(c, t, op, call);
    if (!p.as)
      fail(result::invalid_argument, call,
           std::string("ark does not reduce ") + name_of(t) +
               " with this op, and the call could not be forwarded to NCCL");
  });
  if (r != result::success) return r;
  return reduction(call, c, p, s, f);
}

/// A call that moves bytes: any type, as bytes (every rank passes the same type, so the same
/// byte counts).
template <device P, class F>
result movement(const char* call, comm<P>* c, data_type t, typename P::stream s, F f) {
  const result r = guard(call, [&] { check_type(t, call); });
  if (r != result::success) return r;
  if (c && c->logs_calls()) log(2, [&] { return std::string(call) + " " + name_of(t) + ": ark"; });
  return submit<P>(call, c, s, [=](ark::communicator<P>& a) { f(a, c->options(s), size_of(t)); });
}

// collectives: reductions run in the data's ark type with a run-time op; the others move bytes
// The reductions' work on ark's communicator, in the call's ark type (e) with its op (d).
template <device P>
auto all_reduce_work(const void* in, void* out, std::size_t count) {
  return [=](auto e, op::dynamic d, ark::communicator<P>& a, const call_options<P>& o) {
    using T = decltype(e);
    a.all_reduce(static_cast<const T*>(in), static_cast<T*>(out), count, d, o);
  };
}
template <device P>
auto reduce_scatter_work(const void* in, void* out, std::size_t count) {
  return [=](auto e, op::dynamic d, ark::communicator<P>& a, const call_options<P>& o) {
    using T = decltype(e);
    a.reduce_scatter(static_cast<const T*>(in), static_cast<T*>(out), count, d, o);
  };
}
template <device P>
auto reduce_work(const void* in, void* out, std::size_t count, int root) {
  return [=](auto e, op::dynamic d, ark::communicator<P>& a, const call_options<P>& o) {
    using T = decltype(e);
    a.reduce(static_cast<const T*>(in), static_cast<T*>(out), count, root, d, o);
  };
}

template <device P>
result all_reduce(const void* in, void* out, std::size_t count, data_type t, int op, comm<P>* c,
                  typename P::stream s) {
  return reduction("ncclAllReduce", c, t, op, s, all_reduce_work<P>(in, out, count));
}
template <device P>
result reduce_scatter(const void* in, void* out, std::size_t count, data_type t, int op, comm<P>* c,
                      typename P::stream s) {
  return reduction("ncclReduceScatter", c, t, op, s, reduce_scatter_work<P>(in, out, count));
}
template <device P>
result reduce(const void* in, void* out, std::size_t count, data_type t, int op, int root, comm<P>* c,
              typename P::stream s) {
  return reduction("ncclReduce", c, t, op, s, reduce_work<P>(in, out, count, root));
}

template <device P>
result all_gather(const void* in, void* out, std::size_t count, data_type t, comm<P>* c,
                  typename P::stream s) {
  return movement(
      "ncclAllGather", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.all_gather(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, o);
      });
}
template <device P>
result broadcast(const void* in, void* out, std::size_t count, data_type t, int root, comm<P>* c,
                 typename P::stream s, const char* call = "ncclBroadcast") {
  return movement(call, c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
    a.broadcast(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, root, o);
  });
}
template <device P>
result all_to_all(const void* in, void* out, std::size_t count, data_type t, comm<P>* c,
                  typename P::stream s) {
  return movement(
      "ncclAlltoAll", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.all_to_all(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, o);
      });
}
template <device P>
result gather(const void* in, void* out, std::size_t count, data_type t, int root, comm<P>* c,
              typename P::stream s) {
  return movement(
      "ncclGather", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.gather(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, root, o);
      });
}
template <device P>
result scatter(const void* in, void* out, std::size_t count, data_type t, int root, comm<P>* c,
               typename P::stream s) {
  return movement(
      "ncclScatter", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.scatter(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, root, o);
      });
}
template <device P>
result send(const void* buf, std::size_t count, data_type t, int peer, comm<P>* c, typename P::stream s) {
  return movement("ncclSend", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
    a.send(static_cast<const std::uint8_t*>(buf), count * b, peer, o);
  });
}
template <device P>
result recv(void* buf, std::size_t count, data_type t, int peer, comm<P>* c, typename P::stream s) {
  return movement("ncclRecv", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
    a.recv(static_cast<std::uint8_t*>(buf), count * b, peer, o);
  });
}

// -- memory --------------------------------------------------------------------------------------
template <device P>
result mem_alloc(void** p, std::size_t bytes) {
  return guard("ncclMemAlloc", [&] {
    if (!p) fail(result::invalid_argument, "ncclMemAlloc", "ptr is NULL");
    *p = allocations<P>::get().allocate(bytes);
  });
}
template <device P>
result mem_free(void* p) {
  return guard("ncclMemFree", [&] {
    if (p && !allocations<P>::get().release(p))
      fail(result::invalid_argument, "ncclMemFree", "the pointer was not allocated by ncclMemAlloc");
  });
}

/// ncclCommWindowRegister (collective): ark's register_buffer; the window is the registered base.
template <device P>
result window_register(comm<P>* c, void* p, std::size_t bytes, void** window) {
  const char* call = "ncclCommWindowRegister";
  return guard(call, [&] {
    if (!c || !window) fail(result::invalid_argument, call, "comm or win is NULL");
    c->ark(call).register_buffer(p, bytes);
    *window = p;
  });
}
template <device P>
result window_deregister(comm<P>* c, void* window) {
  const char* call = "ncclCommWindowDeregister";
  return guard(call, [&] {
    if (!c) fail(result::invalid_argument, call, "comm is NULL");
    c->ark(call).deregister_buffer(window);
  });
}

} // namespace ark::nccl
