// tests/support/harness.hpp: a world of ranks for tests, inputs, references and checks; shared by
// the host tests and the GPU tests (the platform is a template parameter).
//
// A world keeps N rank threads alive, each owning a communicator (rank r on GPU r mod the GPU
// count: with more ranks than GPUs, ranks share a GPU), and runs closures on all of them at once,
// the way N processes would each call the same collective.
// Inputs are a pure function of (seed, rank, index), so the reference needs no gathering.
#pragma once

#include "reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ark_test {

/// Runs f(), which must throw E; stores how long it ran in `took`, then rethrows.
template <class E = ark::timeout_error, class F>
void time_until_throw(std::chrono::milliseconds& took, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
  } catch (const E&) {
    took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    throw;
  }
}

using host = ark::platform::host;
using comm_t = ark::communicator<host>;

/// The device of rank r: GPUs round-robin, so that a world larger than the machine still forms
/// (ranks on one GPU reach each other's memory directly; their kernels run side by side on its
/// SMs). The host platform ignores the device.
template <class P>
int rank_device(int rank) {
  if constexpr (std::is_same_v<P, host>)
    return rank;
  else {
    const int n = P::device_count();
    return n > 0 ? rank % n : rank;
  }
}

/// Small slots, so that even small messages take many pipeline steps and wrap the slot ring.
template <class P = host>
typename ark::communicator<P>::config small_config(unsigned threads = 1) {
  typename ark::communicator<P>::config c;
  c.team.workers = 3;
  c.team.max_depth = 8;
  c.team.slot_bytes = 1024;
  c.team.ll_slot_bytes = 512;
  c.tuning.threads = threads;
  c.tuning.bytes_per_worker = 4096;
  c.tuning.ll_bytes_per_worker = 2048;
  c.team.staging = P::synchronous_launch; // the host engine runs on the host only
  c.timeout = std::chrono::milliseconds(20000);
  return c;
}

template <class P>
class basic_world {
public:
  using comm_type = ark::communicator<P>;
  using job = std::function<void(comm_type&, int)>;

  explicit basic_world(int n, typename comm_type::config cfg = small_config<P>()) : n_(n), errors_(n) {
    auto group = std::make_shared<ark::in_process_group>(n);
    for (int r = 0; r < n; ++r)
      threads_.emplace_back([this, group, cfg, r] {
        std::exception_ptr err;
        std::unique_ptr<comm_type> comm;
        try {
          auto mine = cfg;
          mine.device = rank_device<P>(r);
          comm = std::make_unique<comm_type>(ark::in_process_bootstrap(group, r), mine);
        } catch (...) {
          err = std::current_exception();
        }
        for (std::uint64_t seen = 0;;) {
          std::unique_lock<std::mutex> lock(m_);
          cv_.wait(lock, [&] { return generation_ != seen; });
          seen = generation_;
          if (stop_) return;
          const job j = job_;
          lock.unlock();
          std::exception_ptr e = err;
          if (!e) {
            try {
              j(*comm, r);
            } catch (...) {
              e = std::current_exception();
            }
          }
          lock.lock();
          errors_[r] = e;
          if (++done_ == n_) cv_.notify_all();
        }
      });
  }

  ~basic_world() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int size() const { return n_; }

  /// Runs f(comm, rank) on every rank at once; returns each rank's exception (null if none).
  std::vector<std::exception_ptr> try_run(job f) {
    std::unique_lock<std::mutex> lock(m_);
    job_ = std::move(f);
    done_ = 0;
    ++generation_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_ == n_; });
    return errors_;
  }

  /// Runs f on every rank; rethrows the first exception.
  void run(job f) {
    for (auto& e : try_run(std::move(f)))
      if (e) std::rethrow_exception(e);
  }

private:
  int n_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
  job job_;
  std::vector<std::exception_ptr> errors_;
};

using test_world = basic_world<host>;

/// For each world: `rounds` rounds of wrong(comm, rank, k, launches) on every rank, each returning
/// the elements it got wrong and setting the launches its round made; checks that no rank got
/// one wrong and that every round made `launches` launches.
template <class F>
void check_rounds(std::initializer_list<int> worlds, int rounds, std::uint64_t launches, F wrong) {
  for (int world : worlds) {
    CAPTURE(world);
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    std::vector<std::uint64_t> most(world, 0);
    w.run([&](comm_t& c, int rank) {
      for (int k = 0; k < rounds; ++k) {
        std::uint64_t l = 0;
        bad[rank] += wrong(c, rank, k, l);
        most[rank] = std::max(most[rank], l);
      }
    });
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(bad[r] == 0);
      CHECK(most[r] == launches);
    }
  }
}

/// The message of the E that f throws ("no exception" if none).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no exception";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace ark_test
