// tests/support/harness.hpp: a world of ranks for tests, inputs, references and checks; shared by
// the host tests and the GPU tests (the platform is a template parameter).
//
// A world keeps N rank threads alive, each owning a communicator (rank r on GPU r mod the GPU
// count: with more ranks than GPUs, ranks share a GPU), and runs closures on all of them at once,
// the way N processes would each call the same collective.
// Inputs are a pure function of (seed, rank, index), so the reference needs no gathering.
#pragma once

#include "ark/ark.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
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

// -- inputs ---------------------------------------------------------------------------------------
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
inline constexpr bool is_float =
    std::is_floating_point_v<T> || std::is_same_v<T, ark::fp16> || std::is_same_v<T, ark::bf16>;

/// Input element i of rank r: small integers, or floats whose range suits the op.
template <class T, class Op>
T input(std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t h = mix(seed * 1000003u + static_cast<std::uint64_t>(rank) * 7919u + mix(i));
  const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0); // [0, 1)
  if constexpr (is_float<T>) {
    const double v = std::is_same_v<Op, ark::op::prod> ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
    return static_cast<T>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Op, ark::op::prod>) {
    return static_cast<T>(static_cast<int>(h % 7) - (std::is_signed_v<T> ? 3 : 0));
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {
    return static_cast<T>(h % 32);
  } else {
    return static_cast<T>(static_cast<std::int64_t>(h % 2001) - 1000);
  }
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, ark::fp16> || std::is_same_v<T, ark::bf16>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}

/// Unit roundoff of T's arithmetic (fp16/bf16 are stored, not computed, in 16 bits).
template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, ark::fp16>)
    return std::ldexp(1.0, -11);
  else if constexpr (std::is_same_v<T, ark::bf16>)
    return std::ldexp(1.0, -8);
  else if constexpr (std::is_same_v<T, float>)
    return std::ldexp(1.0, -24);
  else
    return std::ldexp(1.0, -53);
}

/// The exact result of reducing `values` (rank order) with Op: integer ops wrap like ark's.
template <class T, class Op>
struct reference {
  double value = 0;     // floats: the exact (double) result
  double magnitude = 0; // floats: the bound's scale
  T exact{};            // integers, and min/max of floats: the exact T result
};

template <class T, class Op>
reference<T, Op> reduce_reference(const std::vector<T>& values) {
  reference<T, Op> ref;
  const int n = static_cast<int>(values.size());
  if constexpr (is_float<T>) {
    double acc = as_double(values[0]), mag = std::fabs(acc);
    T best = values[0];
    for (int r = 1; r < n; ++r) {
      const double v = as_double(values[r]);
      if constexpr (std::is_same_v<Op, ark::op::prod>)
        acc *= v;
      else
        acc += v;
      mag += std::fabs(v);
      if constexpr (std::is_same_v<Op, ark::op::min>) best = v < as_double(best) ? values[r] : best;
      if constexpr (std::is_same_v<Op, ark::op::max>) best = v > as_double(best) ? values[r] : best;
    }
    if constexpr (std::is_same_v<Op, ark::op::avg>) acc /= n, mag /= n;
    if constexpr (std::is_same_v<Op, ark::op::prod>) mag = std::fabs(acc);
    ref.value = acc, ref.magnitude = mag, ref.exact = best;
  } else {
    using U = std::make_unsigned_t<std::conditional_t<std::is_same_v<T, std::uint8_t>, std::uint64_t, T>>;
    U acc = static_cast<U>(values[0]);
    T best = values[0];
    for (int r = 1; r < n; ++r) {
      if constexpr (std::is_same_v<Op, ark::op::prod>)
        acc = static_cast<U>(acc * static_cast<U>(values[r]));
      else
        acc = static_cast<U>(acc + static_cast<U>(values[r]));
      best = std::is_same_v<Op, ark::op::min> ? std::min(best, values[r]) : std::max(best, values[r]);
    }
    if constexpr (std::is_same_v<Op, ark::op::min> || std::is_same_v<Op, ark::op::max>)
      ref.exact = best;
    else if constexpr (std::is_same_v<Op, ark::op::avg>)
      ref.exact = static_cast<T>(static_cast<T>(acc) / static_cast<T>(n));
    else
      ref.exact = static_cast<T>(acc);
  }
  return ref;
}

/// Whether `got` matches the reference: exact for integers and min/max; for floats within
/// 2 * world * u * magnitude (u: T's unit roundoff), the bound of `world` roundings.
template <class T, class Op>
bool matches(T got, const reference<T, Op>& ref, int world) {
  if constexpr (!is_float<T> || std::is_same_v<Op, ark::op::min> || std::is_same_v<Op, ark::op::max>) {
    return std::memcmp(&got, &ref.exact, sizeof(T)) == 0;
  } else {
    const double g = as_double(got);
    if (std::isnan(g)) return false;
    const double tol = 2.0 * world * unit_roundoff<T>() * ref.magnitude + 1e-30;
    return std::fabs(g - ref.value) <= tol;
  }
}

template <class T>
std::string show(T v) {
  if constexpr (is_float<T>)
    return std::to_string(as_double(v));
  else
    return std::to_string(static_cast<long long>(v));
}

/// Fills with a poison byte pattern: NaN for the float types.
template <class T>
void poison(std::vector<T>& v, unsigned char byte) {
  if (!v.empty()) std::memset(static_cast<void*>(v.data()), byte, v.size() * sizeof(T));
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
