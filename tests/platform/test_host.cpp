// The host platform: a launch runs the work once per (worker, thread) with the right identities
// and returns when all are done; its pool grows and shrinks between launches; memory is zeroed.
#include "ark/platform/host.hpp"
#include "ark/concepts/device.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {
struct record_work {
  std::vector<std::atomic<int>>* seen;
  unsigned threads;
  template <class G>
  void operator()(G& g, unsigned worker, unsigned workers) const {
    if (g.size() != threads || g.thread_rank() >= threads || worker >= workers) return;
    (*seen)[worker * threads + g.thread_rank()]++;
  }
};
} // namespace

TEST_CASE("host platform: launches cover every (worker, thread) once, across changing shapes") {
  using P = ark::platform::host;
  P::stream s = P::create_stream(0);
  for (ark::launch_shape shape : {ark::launch_shape{1, 1}, {3, 2}, {2, 4}, {1, 1}, {4, 1}}) {
    std::vector<std::atomic<int>> seen(shape.workers * shape.threads);
    P::launch(s, shape, record_work{&seen, shape.threads});
    int ok = 0;
    for (auto& v : seen) ok += v.load() == 1;
    CHECK(ok == static_cast<int>(seen.size()));
  }
  P::destroy_stream(s);
  P::memory m = P::allocate(10000, 0);
  int nonzero = 0;
  for (std::size_t i = 0; i < 10000; ++i) nonzero += m.ptr[i] != std::byte{0};
  CHECK(nonzero == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(m.ptr) % 4096 == 0);
  CHECK(P::import_handle(P::export_handle(m), 0) == m.ptr);
  P::release(m);
}

namespace {
/// Thread 1 of worker 1 throws before its team's barrier; every other thread meets it twice.
struct throwing_work {
  std::atomic<int>* passed;
  template <class G>
  void operator()(G& g, unsigned worker, unsigned) const {
    if (worker == 1 && g.thread_rank() == 1) throw std::runtime_error("user work failed");
    g.sync();
    g.sync();
    passed->fetch_add(1);
  }
};
} // namespace

TEST_CASE("host platform: a thread that throws breaks its team's barrier; the launch rethrows, never hangs") {
  using P = ark::platform::host;
  P::stream s = P::create_stream(0);
  std::atomic<int> passed{0};
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(P::launch(s, ark::launch_shape{3, 4}, throwing_work{&passed}), "user work failed",
                       std::runtime_error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(passed.load() == 8); // workers 0 and 2 were not disturbed
  // the stream stays usable: the next launch's barriers are whole again
  std::vector<std::atomic<int>> seen(12);
  P::launch(s, ark::launch_shape{3, 4}, record_work{&seen, 4});
  int ok = 0;
  for (auto& v : seen) ok += v.load() == 1;
  CHECK(ok == 12);
  P::destroy_stream(s);
}

TEST_CASE("device clocks: a bound is scaled to the rate of the clock that measures it") {
  using ark::detail::span_on_clock;
  // ROCm's now_ns() counts 10 ns a wall-clock tick (100 MHz): on gfx908 (25 MHz) 30 s of real time
  // is 7.5 s of its count, on a 200 MHz clock 60 s
  CHECK(span_on_clock(30'000'000'000ull, 100000, 25000) == 7'500'000'000ull);
  CHECK(span_on_clock(30'000'000'000ull, 100000, 200000) == 60'000'000'000ull);
  CHECK(span_on_clock(7, 100000, 100000) == 7); // the assumed rate: unchanged (CUDA, gfx90a, gfx94x)
  CHECK(span_on_clock(123, 100000, 0) == 123);  // the rate unknown: unchanged
  CHECK(span_on_clock(999, 3, 1) == 333);       // rounds down
  CHECK(span_on_clock(UINT64_MAX / 2, 1, 4) == UINT64_MAX); // saturates, never wraps to a short bound
  CHECK(span_on_clock(UINT64_MAX, 1000, 999) == UINT64_MAX / 1000 * 999 + UINT64_MAX % 1000 * 999 / 1000);
}
