// Bad input is an error before anything moves; a mismatched call is an error, never garbage; a
// rank that never arrives is a timeout within the bound; abort ends waits; teardown is clean.
#include "../support/collective_check.hpp"

#include <atomic>
#include <chrono>
#include <thread>

using namespace ark_test;
using namespace std::chrono_literals;

TEST_CASE("errors: bad arguments are rejected before any data moves, and the communicator stays usable") {
  test_world w(2);
  std::vector<std::string> msgs[2];
  std::vector<float> untouched[2];
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(64, 1.0f), out(64, -7.0f);
    auto& m = msgs[rank];
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::one_shot>(static_cast<const float*>(nullptr), out.data(), 8); }));
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.all_reduce(in.data(), static_cast<float*>(nullptr), 8); }));
    const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.data()) + 2);
    m.push_back(message_of<ark::invalid_argument>([&] { c.all_reduce(odd, out.data(), 8); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.all_reduce(in.data(), in.data() + 4, 8); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.broadcast(in.data(), out.data(), 8, 2); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.reduce(in.data(), out.data(), 8, -1); }));
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::ring, ark::dma::thread_copy<9>>(in.data(), out.data(), 8); }));
    ark::call_options<host> too_many;
    too_many.workers = 99;
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce(in.data(), out.data(), 8, ark::op::sum{}, too_many); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.all_gather(out.data() + 2, out.data(), 4); }));
    ark::call_options<host> negative;
    negative.timeout = -1ms; // not "the default": refused
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce(in.data(), out.data(), 8, ark::op::sum{}, negative); }));
    ark::call_options<host> over_budget;
    over_budget.workers = 2;
    over_budget.max_ctas = 1; // not cut to one worker: refused
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce(in.data(), out.data(), 8, ark::op::sum{}, over_budget); }));
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.launch([](const auto&) { return true; }, 1, negative); }));
    ark::call_options<host> engine_only;
    engine_only.max_ctas = 0; // the copy engine alone: a custom collective has nothing to run on
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.launch([&](const auto&) { return out[0] = 1.0f, true; }, 1, engine_only); }));
    ark::call_options<host> one_block;
    one_block.max_ctas = 1;
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.launch([&](const auto&) { return out[0] = 1.0f, true; }, 2, one_block); }));
    untouched[rank] = out;
    // still usable: a correct call after the rejected ones
    c.all_reduce(in.data(), out.data(), 64);
    for (float v : out) REQUIRE(v == 2.0f);
  });
  for (int r = 0; r < 2; ++r) {
    const auto& m = msgs[r];
    CHECK(contains(m[0], "send buffer is null but count is 8"));
    CHECK(contains(m[1], "recv buffer is null but count is 8"));
    CHECK(contains(m[2], "send buffer"));
    CHECK(contains(m[2], "is not aligned to its element type (4 bytes)"));
    CHECK(contains(m[3], "overlap"));
    CHECK(contains(m[4], "root 2 is outside [0, 2)"));
    CHECK(contains(m[5], "root -1"));
    CHECK(contains(m[6], "pipeline depth 9 exceeds team_config.max_depth 8"));
    CHECK(contains(m[7], "workers 99 exceeds"));
    CHECK(contains(m[8], "overlap"));
    CHECK(contains(m[9], "timeout must be 0 (the communicator's) or positive"));
    CHECK(contains(m[10], "workers 2 exceeds max_ctas 1"));
    CHECK(contains(m[11], "launch: timeout must be"));
    CHECK(
        contains(m[12], "launch: max_ctas = 0 (the copy engine alone) leaves a custom collective no block"));
    CHECK(contains(m[13], "launch: workers 2 exceeds max_ctas 1"));
    for (float v : untouched[r]) CHECK(v == -7.0f);
  }
}

TEST_CASE("errors: world size zero or beyond the limit") {
  CHECK(contains(message_of<ark::invalid_argument>([] { ark::in_process_group g(0); }), "world size 0"));
  CHECK(contains(message_of<ark::invalid_argument>([] { ark::in_process_group g(ark::max_world + 1); }),
                 "world size 65"));
  CHECK(contains(message_of<ark::invalid_argument>([] { (void)ark::make_layout(0, ark::team_config{}); }),
                 "world size 0 is outside [1, 64]"));
  CHECK(contains(message_of<ark::invalid_argument>([] { (void)ark::make_layout(65, ark::team_config{}); }),
                 "world size 65"));
  CHECK(contains(message_of<ark::invalid_argument>([] {
                   auto g = std::make_shared<ark::in_process_group>(2);
                   ark::in_process_bootstrap b(g, 2);
                 }),
                 "rank 2 is outside [0, 2)"));
}

TEST_CASE("errors: a configuration that cannot work is refused when the communicator is built") {
  auto build = [](auto edit) {
    return [edit] {
      comm_t::config cfg = small_config();
      edit(cfg);
      comm_t c(ark::in_process_bootstrap(std::make_shared<ark::in_process_group>(1), 0), cfg);
    };
  };
  CHECK(contains(message_of<ark::invalid_argument>(build([](comm_t::config& c) { c.ce_chunk_bytes = 0; })),
                 "ce_chunk_bytes must be positive"));
  CHECK(contains(message_of<ark::invalid_argument>(build([](comm_t::config& c) { c.tuning.threads = 0; })),
                 "tuning.threads"));
  CHECK(contains(
      message_of<ark::invalid_argument>(build([](comm_t::config& c) { c.tuning.ll_bytes_per_worker = 0; })),
      "tuning.ll_bytes_per_worker must be positive"));
  CHECK(contains(message_of<ark::invalid_argument>(
                     build([](comm_t::config& c) { c.timeout = std::chrono::milliseconds(0); })),
                 "timeout must be positive"));
}

TEST_CASE("errors: the longest timeout a config can hold is no timeout, never an instant one") {
  // milliseconds::max() is more nanoseconds than a 64-bit count holds: it saturates
  test_world w(2, [] {
    comm_t::config cfg = small_config();
    cfg.timeout = std::chrono::milliseconds::max();
    return cfg;
  }());
  w.run([&](comm_t& c, int rank) {
    CHECK(c.team().timeout_ns == UINT64_MAX);
    if (rank == 1) std::this_thread::sleep_for(50ms); // a peer late by far more than an instant
    std::vector<float> in(64, 1.0f + rank), out(64, -7.0f);
    c.all_reduce(in.data(), out.data(), 64);
    for (float v : out) REQUIRE(v == 3.0f);
  });
}

TEST_CASE("errors: ranks configured differently are refused when the communicator is built") {
  // each setting that makes a call's choices (rank 1 sets it otherwise), refused on every rank
  using edit = void (*)(comm_t::config&);
  const std::pair<edit, const char*> settings[] = {
      {[](comm_t::config& c) { c.ce_chunk_bytes = 2 << 20; }, "ce_chunk_bytes"}, // the copy-engine rounds
      {[](comm_t::config& c) { c.tuning.ll_max_bytes = 0; }, "tuning.ll_max_bytes"},
      {[](comm_t::config& c) { c.tuning.one_shot_max_bytes = 0; }, "tuning.one_shot_max_bytes"},
      {[](comm_t::config& c) { c.tuning.direct_max_world = 1; }, "tuning.direct_max_world"},
      {[](comm_t::config& c) { c.tuning.bytes_per_worker = 1; }, "tuning.bytes_per_worker"},
      {[](comm_t::config& c) { c.tuning.ll_bytes_per_worker = 1; }, "tuning.ll_bytes_per_worker"},
      {[](comm_t::config& c) { c.tuning.threads += 1; }, "tuning.threads"},
      {[](comm_t::config& c) { c.early_launch = !c.early_launch; }, "early_launch"},
      {[](comm_t::config& c) { c.engine = ark::engine_path::device_graphs; }, "engine"},
  };
  for (const auto& [change, name] : settings) {
    CAPTURE(name);
    auto group = std::make_shared<ark::in_process_group>(2);
    std::string msgs[2];
    auto build = [&](int rank) {
      comm_t::config cfg = small_config();
      if (rank == 1) change(cfg);
      msgs[rank] =
          message_of<ark::invalid_argument>([&] { comm_t c(ark::in_process_bootstrap(group, rank), cfg); });
    };
    std::thread other(build, 1);
    build(0);
    other.join();
    for (const auto& m : msgs) {
      CAPTURE(m);
      CHECK(contains(m, std::string("configured a different ") + name));
    }
  }
}

namespace {
enum class queued { all_reduce, broadcast };

/// One call of the kind under test: an all-reduce, or a broadcast from rank 1 (rank 0 only
/// receives: no credit is waited for before it reads).
template <class B, queued K>
struct one_call {
  ark::device_comm<host> comm;
  const std::int32_t* in;
  std::int32_t* out;
  std::size_t n;
  template <class G>
  bool operator()(G& g, unsigned w, unsigned nw) const {
    if constexpr (K == queued::all_reduce)
      return comm.all_reduce<ark::algo::one_shot, B>(g, w, nw, in, out, n);
    else
      return comm.broadcast<B>(g, w, nw, in, out, n, 1);
  }
};

/// Inside one launch: rank 1 makes the call 600 ms late, rank 0's times out (200 ms); then rank 0
/// makes a second call with other data and a long bound, which must refuse and store nothing. An
/// all-reduce's second call comes at once (its packets would overwrite what rank 1 is still to
/// read); a broadcast's 800 ms later (rank 1's late data would be there on its first look).
template <class B, queued K>
struct call_after_failure {
  one_call<B, K> late, next; // rank 0: the short bound, then the long one
  int rank;
  bool* ok; // per call, written by thread 0
  template <class G>
  static void pause(G& g, std::chrono::milliseconds d) { // the whole scope
    g.sync();
    if (g.thread_rank() == 0) std::this_thread::sleep_for(d);
    g.sync();
  }
  template <class G>
  void operator()(G& g, unsigned w, unsigned nw) const {
    if (rank == 1) pause(g, 600ms);
    const bool b = late(g, w, nw);
    if (K == queued::broadcast && rank == 0) pause(g, 800ms); // the root's late data is there first
    const bool c = rank == 1 || next(g, w, nw);
    if (g.thread_rank() == 0) ok[0] = b, ok[1] = c;
  }
};

template <class B, queued K>
void check_call_after_failure() {
  test_world w(2, small_config(16));
  const std::size_t n = 20; // LL: one step, a packet per thread (the latency path, credits implied)
  std::vector<std::vector<std::int32_t>> outs(2, std::vector<std::int32_t>(n, -7));
  std::vector<std::int32_t> out2(n, -7);
  bool first_ok[2] = {}, ok[2][2] = {};
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    std::vector<std::int32_t> first(n), other(n, 1000), scratch(n);
    for (std::size_t i = 0; i < n; ++i) first[i] = static_cast<std::int32_t>(i + 100 * rank);
    // a call both ranks make on time (after it, LL credits are implied), with the long bound
    auto patient = c.device_handle(), hasty = patient;
    patient.team.timeout_ns = 20'000'000'000ull;
    hasty.team.timeout_ns = rank == 0 ? 200'000'000ull : patient.team.timeout_ns; // rank 0 gives up first
    host::launch(c.stream(), ark::launch_shape{1, 16}, [&](auto& g, unsigned wk, unsigned nw) {
      const bool r = one_call<B, K>{patient, first.data(), scratch.data(), n}(g, wk, nw);
      if (g.thread_rank() == 0) first_ok[rank] = r;
    });
    host::launch(c.stream(), ark::launch_shape{1, 16},
                 call_after_failure<B, K>{{hasty, first.data(), outs[rank].data(), n},
                                          {patient, other.data(), out2.data(), n},
                                          rank,
                                          ok[rank]});
    c.synchronize();
  });
  CHECK(first_ok[0]);
  CHECK(first_ok[1]);
  CHECK(static_cast<bool>(errs[0])); // rank 0: the late call timed out, recorded
  CHECK_FALSE(static_cast<bool>(errs[1]));
  CHECK_FALSE(ok[0][0]);
  CHECK_FALSE(ok[0][1]);
  CHECK(ok[1][0]);
  if constexpr (K == queued::all_reduce) {
    // rank 1's late call got rank 0's data of that call, not of the call queued behind it
    for (std::size_t i = 0; i < n; ++i) CHECK(outs[1][i] == static_cast<std::int32_t>(2 * i + 100));
  } else {
    for (std::size_t i = 0; i < n; ++i) CHECK(outs[1][i] == static_cast<std::int32_t>(i + 100));
  }
  // rank 0's next call refused: without the refusal it would take the late call's data (the
  // broadcast: rank 1's, arriving within its long bound) as its own
  for (std::int32_t v : out2) CHECK(v == -7);
}
} // namespace

TEST_CASE("errors: a call behind a failed one stores nothing into the peers' slots") {
  SUBCASE("LL all-reduce, credits implied") {
    check_call_after_failure<ark::dma::ll_packet<1>, queued::all_reduce>();
  }
  SUBCASE("thread-copy all-reduce, credits read") {
    check_call_after_failure<ark::dma::thread_copy<1>, queued::all_reduce>();
  }
  SUBCASE("broadcast, a receiver only: no credit to wait for") {
    check_call_after_failure<ark::dma::thread_copy<1>, queued::broadcast>();
  }
  SUBCASE("LL broadcast") { check_call_after_failure<ark::dma::ll_packet<1>, queued::broadcast>(); }
}

namespace {
/// Runs `f` on every rank; expects every rank to throw a mismatch_error naming `field`, and
/// checks that the outputs (poisoned with -7) were not touched.
template <class F>
void expect_mismatch(F f, ark::desc_field field, comm_t::config cfg = small_config()) {
  test_world w(2, cfg);
  std::vector<std::vector<float>> outs(2);
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    std::vector<float> in(300, 1.0f);
    outs[rank].assign(300, -7.0f);
    f(c, rank, in.data(), outs[rank].data());
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(errs[r]);
    try {
      std::rethrow_exception(errs[r]);
    } catch (const ark::mismatch_error& e) {
      CHECK(e.record().what == static_cast<std::uint32_t>(field));
      CHECK(e.record().peer == 1 - r);
      CHECK(contains(e.what(), ark::to_string(field)));
    } catch (const std::exception& e) {
      FAIL("expected a mismatch_error, got: " << e.what());
    }
    for (float v : outs[r]) REQUIRE(v == -7.0f);
  }
  // the communicator is unusable afterwards, with a clear error
  const auto again = w.try_run([](comm_t& c, int) {
    std::vector<float> in(16, 1.0f), out(16);
    c.all_reduce(in.data(), out.data(), 16);
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(again[r]);
    try {
      std::rethrow_exception(again[r]);
    } catch (const ark::error& e) {
      CHECK(contains(e.what(), "unusable after an earlier failure"));
    }
  }
}
} // namespace

TEST_CASE("errors: a count, dtype, op, algorithm or root that differs between ranks is a mismatch error") {
  using one_shot = ark::algo::one_shot;
  using tc = ark::dma::thread_copy<2>;
  SUBCASE("count") {
    expect_mismatch([](comm_t& c, int rank, float* in,
                       float* out) { c.all_reduce<one_shot, tc>(in, out, rank ? 200 : 100); },
                    ark::desc_field::count);
  }
  SUBCASE("dtype") {
    expect_mismatch(
        [](comm_t& c, int rank, float* in, float* out) {
          if (rank)
            c.all_reduce<one_shot, tc>(reinterpret_cast<std::int32_t*>(in),
                                       reinterpret_cast<std::int32_t*>(out), 100);
          else
            c.all_reduce<one_shot, tc>(in, out, 100);
        },
        ark::desc_field::dtype);
  }
  SUBCASE("op") {
    expect_mismatch(
        [](comm_t& c, int rank, float* in, float* out) {
          if (rank)
            c.all_reduce<one_shot, tc>(in, out, 100, ark::op::max{});
          else
            c.all_reduce<one_shot, tc>(in, out, 100, ark::op::sum{});
        },
        ark::desc_field::op);
  }
  SUBCASE("algorithm") {
    expect_mismatch(
        [](comm_t& c, int rank, float* in, float* out) {
          if (rank)
            c.all_reduce<ark::algo::two_shot, tc>(in, out, 100);
          else
            c.all_reduce<one_shot, tc>(in, out, 100);
        },
        ark::desc_field::algorithm);
  }
  SUBCASE("LL packets: count") {
    expect_mismatch(
        [](comm_t& c, int rank, float* in, float* out) {
          c.all_reduce<one_shot, ark::dma::ll_packet<2>>(in, out, rank ? 64 : 32);
        },
        ark::desc_field::count);
  }
  // The single-step LL path (16 threads per worker, a vector each) checks headers while it
  // polls data; the rank with the larger count polls packets that never come: the mismatch
  // must still be reported as one, at once (a long timeout makes a wait for it fail the check).
  auto cfg = small_config(16);
  cfg.timeout = 60s;
  SUBCASE("LL packets, single step: count") {
    const auto t0 = std::chrono::steady_clock::now();
    expect_mismatch(
        [](comm_t& c, int rank, float* in, float* out) {
          c.all_reduce<one_shot, ark::dma::ll_packet<4>>(in, out, rank ? 30 : 12);
        },
        ark::desc_field::count, cfg);
    CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  }
  SUBCASE("LL packets, single step: op") {
    expect_mismatch(
        [](comm_t& c, int rank, float* in, float* out) {
          if (rank)
            c.all_reduce<one_shot, ark::dma::ll_packet<1>>(in, out, 20, ark::op::min{});
          else
            c.all_reduce<one_shot, ark::dma::ll_packet<1>>(in, out, 20, ark::op::sum{});
        },
        ark::desc_field::op, cfg);
  }
}

TEST_CASE(
    "errors: single-step LL with more ranks than threads: a count mismatch is reported by every rank, at "
    "once") {
  // 2 threads per worker, 4 ranks: each thread checks two peers' headers; rank 3's shorter share
  // leaves packets that never come, so the headers must be checked before those polls.
  auto cfg = small_config(2);
  cfg.timeout = 60s;
  test_world w(4, cfg);
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = w.try_run([](comm_t& c, int rank) {
    std::vector<float> in(4, 1.0f), out(4, -7.0f);
    c.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<2>>(in.data(), out.data(), rank == 3 ? 2 : 4);
  });
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  for (int r = 0; r < 4; ++r) {
    REQUIRE(errs[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::mismatch_error);
  }
}

TEST_CASE("errors: a root outside the team, given to the device-side API, fails at once on every rank") {
  // the host API refuses it before launching (first case); inside a kernel it is recorded, not waited on
  for (const int root : {-1, 2, 70}) {
    CAPTURE(root);
    test_world w(2);
    bool ok[2] = {true, true};
    std::vector<std::int32_t> outs[2];
    const auto t0 = std::chrono::steady_clock::now();
    const auto errs = w.try_run([&](comm_t& c, int rank) {
      std::vector<std::int32_t> in(40, rank + 1);
      outs[rank].assign(40, -7);
      const auto d = c.device_handle();
      host::launch(c.stream(), ark::launch_shape{1, 16}, [&](auto& g, unsigned wk, unsigned nw) {
        const bool r =
            root < 0 ? d.reduce<ark::dma::thread_copy<1>>(g, wk, nw, in.data(), outs[rank].data(), 40, root)
                     : d.broadcast<ark::dma::ll_packet<1>>(g, wk, nw, in.data(), outs[rank].data(), 40, root);
        if (g.thread_rank() == 0) ok[rank] = r;
      });
      c.synchronize();
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)); // the bound is 5 s
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK_FALSE(ok[r]);
      REQUIRE(errs[r]);
      CHECK(contains(message_of<ark::error>([&] { std::rethrow_exception(errs[r]); }),
                     "root " + std::to_string(root) + " is outside [0, 2)"));
      for (const auto v : outs[r]) CHECK(v == -7);
    }
  }
}

TEST_CASE("errors: a root that differs between ranks is a mismatch error on every rank, not garbage") {
  // A rank that names another root sends elsewhere; the step of headers that opens a rooted
  // collective (algorithms::send_headers) carries the root to every rank, which checks it.
  auto cfg = small_config();
  cfg.timeout = 20s;
  test_world w(3, cfg);
  std::vector<float> root_out;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    std::vector<float> in(100, 1.0f), out(100, -7.0f);
    try {
      c.reduce<ark::dma::thread_copy<2>>(in.data(), out.data(), 100, rank == 2 ? 1 : 0);
    } catch (...) {
      if (rank == 0) root_out = out;
      throw;
    }
  });
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(errs[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::mismatch_error);
  }
  for (float v : root_out) CHECK(v == -7.0f);
}

TEST_CASE("errors: a rank that never arrives is a timeout error within the bound, and teardown is clean") {
  auto cfg = small_config();
  cfg.timeout = 300ms;
  std::vector<std::chrono::milliseconds> took(3);
  std::vector<int> peer(3, -2);
  {
    test_world w(3, cfg);
    const auto errs = w.try_run([&](comm_t& c, int rank) {
      if (rank == 2) return; // this rank never joins the call
      std::vector<float> in(1000, 1.0f), out(1000);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        c.all_reduce(in.data(), out.data(), 1000);
      } catch (const ark::timeout_error& e) {
        took[rank] =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
        peer[rank] = e.record().peer;
        throw;
      }
    });
    for (int r = 0; r < 2; ++r) {
      REQUIRE(errs[r]);
      CHECK(took[r] >= 300ms);
      CHECK(took[r] < 300ms + 1500ms);
      CHECK(peer[r] == 2);
    }
    CHECK_FALSE(errs[2]);
  } // every communicator is destroyed here: the teardown barrier must not hang
  SUBCASE("a rank that never builds its communicator") {
    auto group = std::make_shared<ark::in_process_group>(2, 200ms);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(comm_t(ark::in_process_bootstrap(group, 0), cfg), ark::timeout_error);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  }
}

// With 16 threads per worker, the threads other than the first two read the abort flag only every
// 10 ms (context::keep_waiting): the abort still ends every wait within the bound.
TEST_CASE("errors: abort from another thread ends a wait at once; later calls fail; teardown is clean") {
  for (unsigned threads : {1u, 16u}) {
    CAPTURE(threads);
    auto cfg = small_config(threads);
    cfg.timeout = 30s;
    test_world w(2, cfg);
    std::chrono::milliseconds took{};
    std::string later;
    const auto errs = w.try_run([&](comm_t& c, int rank) {
      if (rank == 1) return;
      std::thread killer([&] {
        std::this_thread::sleep_for(100ms);
        c.abort();
      });
      std::vector<float> in(100, 1.0f), out(100);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        c.all_reduce(in.data(), out.data(), 100);
      } catch (const ark::aborted_error&) {
        took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      }
      killer.join();
      later = message_of<ark::aborted_error>([&] { c.all_reduce(in.data(), out.data(), 100); });
    });
    CHECK_FALSE(errs[0]);
    CHECK(took >= 100ms);
    CHECK(took < 5s);
    CHECK(contains(later, "aborted"));
  }
}

TEST_CASE("errors: close() is teardown's collective half: every rank arrives, later calls are refused") {
  test_world w(3);
  std::vector<int> first(3), second(3);
  std::vector<std::string> later(3);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(100, float(rank)), out(100);
    c.all_reduce(in.data(), out.data(), 100);
    first[rank] = c.close();
    second[rank] = c.close(); // answers alike, without waiting for the peers again
    later[rank] = message_of<ark::invalid_argument>([&] { c.all_reduce(in.data(), out.data(), 100); });
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(first[r] == 1);
    CHECK(second[r] == 1);
    CHECK(contains(later[r], "closed"));
  }
}

TEST_CASE("errors: a rank that never closes makes close() answer false within the bound (memory kept)") {
  auto cfg = small_config();
  cfg.timeout = 300ms;
  test_world w(2, cfg);
  int quiet = -1;
  std::chrono::milliseconds took{};
  w.run([&](comm_t& c, int rank) {
    if (rank == 1) return;
    const auto t0 = std::chrono::steady_clock::now();
    quiet = c.close();
    took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  });
  CHECK(quiet == 0);
  CHECK(took >= 300ms);
  CHECK(took < 5s);
}
