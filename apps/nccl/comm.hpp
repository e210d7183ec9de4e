// apps/nccl/comm.hpp: one rank's communicator (ark's, the shim's own bootstrap, its user ops), and
// what keeps its teardown safe beside other ranks' launches: the launch gate, the live ranks,
// ncclMemAlloc's allocations and the reaper thread.
#pragma once

#include "nccl/ids.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ark::nccl {

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

} // namespace ark::nccl
