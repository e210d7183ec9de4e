// ark/platform/host_team.hpp: host_team, the scope a host worker's threads form, and the barrier
// they share.
//
// A scope is how a platform runs a worker's threads, so its model lives with the platform that
// constructs it: host_stream::run (platform/host.hpp) gives each worker a host_barrier and each of
// its threads a host_team over it.
#pragma once

#include "ark/concepts/scope.hpp"
#include "ark/core/error.hpp"

#include <atomic>
#include <thread>

namespace ark {

/// A reusable barrier for a fixed number of threads that also ORs a predicate across them.
/// Spins briefly, then yields, then sleeps on the generation word: ranks may outnumber cores.
/// Broken (a thread of the team ended with an exception and will never arrive), it throws
/// aborted_error in every thread that waits or arrives, so that the team unwinds, never hangs.
/// any_[g & 1] is generation g's predicate. The last thread to arrive at g clears any_ of g + 1
/// before it releases g; that word was g - 1's, and every thread has read it, since each reads
/// its generation's word before it arrives at the next one, and all arrived at g.
class host_barrier {
public:
  explicit host_barrier(unsigned n = 1) : n_(n) {}
  host_barrier(const host_barrier&) = delete;
  host_barrier& operator=(const host_barrier&) = delete;

  void reset(unsigned n) {
    n_ = n;
    broken_.store(false);
    count_.store(0);
    any_[0].store(0);
    any_[1].store(0);
  }

  void break_for_good() {
    broken_.store(true);
    gen_.fetch_add(1, std::memory_order_acq_rel);
    gen_.notify_all();
  }

  bool arrive_and_wait(bool p) {
    check();
    const unsigned g = gen_.load(std::memory_order_acquire);
    if (p) any_[g & 1].store(1, std::memory_order_relaxed);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      any_[(g + 1) & 1].store(0, std::memory_order_relaxed);
      gen_.store(g + 1, std::memory_order_release);
      gen_.notify_all();
    } else {
      for (unsigned spins = 0; gen_.load(std::memory_order_acquire) == g; ++spins) {
        if (spins < 256)
          std::this_thread::yield();
        else
          gen_.wait(g, std::memory_order_acquire);
      }
      check();
    }
    return any_[g & 1].load(std::memory_order_relaxed) != 0;
  }

private:
  void check() const {
    if (broken_.load())
      throw aborted_error("host team: another thread of this worker ended with an exception");
  }

  unsigned n_;
  std::atomic<bool> broken_{false};
  std::atomic<unsigned> count_{0};
  std::atomic<unsigned> gen_{0};
  std::atomic<unsigned> any_[2] = {0, 0};
};

/// The threads of one worker of a host rank.
class host_team {
public:
  host_team(host_barrier* bar, unsigned rank, unsigned size) : bar_(bar), rank_(rank), size_(size) {}
  ARK_HD unsigned thread_rank() const { return rank_; }
  ARK_HD unsigned size() const { return size_; }
  ARK_HD void sync() { ARK_HOST_ONLY(if (size_ > 1) bar_->arrive_and_wait(false)); }
  ARK_HD bool sync_any(bool p) { ARK_HOST_ONLY(return size_ > 1 ? bar_->arrive_and_wait(p) : p); }

private:
  host_barrier* bar_;
  unsigned rank_;
  unsigned size_;
};

static_assert(scope<host_team>);

} // namespace ark
