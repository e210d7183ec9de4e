// The communicator beyond single calls: 1000 back-to-back calls of random sizes and algorithms,
// a 64 MB all-reduce, user ops, user scratch, registered buffers, the device-side API in a
// persistent loop. Custom collectives from the public primitives are examples/03's, which CI runs
// at worlds 1 to 5.
#include "../support/collective_check.hpp"
#include "../support/persistent_loop.hpp"

#include <random>
#include <thread>

using namespace ark_test;
using namespace std::chrono_literals;

namespace {

/// A user op without an id: the largest magnitude, sign kept.
struct absmax {
  template <class A>
  ARK_HD A operator()(A a, A b) const {
    return (a < 0 ? -a : a) < (b < 0 ? -b : b) ? b : a;
  }
};
/// A user op with an id and a finalize step: sum of squares, then the root mean square... of
/// integers, so results stay exact: sum of squares divided by the world size.
struct mean_square {
  static constexpr std::uint8_t id = 100;
  template <class A>
  ARK_HD A operator()(A a, A b) const {
    return a + b;
  }
  template <class A>
  ARK_HD A finalize(A a, int world) const {
    return a / static_cast<A>(world);
  }
};
struct not_an_op {
  int operator()(int a) const { return a; }
};

static_assert(ark::reduce_op<absmax, float> && ark::reduce_op<absmax, ark::fp16>);
static_assert(ark::finalizing_op<mean_square, std::int64_t> && ark::op_id<mean_square> == 100);
static_assert(!ark::reduce_op<not_an_op, float> && !ark::reduce_op<ark::op::sum, char>);

using i32 = std::int32_t;

} // namespace

TEST_CASE("communicator: 1000 back-to-back calls of random size, algorithm and backend") {
  const callee<i32> callees[] = {
      make_callee<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, i32,
                  ark::op::sum>(),
      make_callee<ark::collective::all_reduce, ark::algo::one_shot, ark::dma::ll_packet<1>, i32,
                  ark::op::sum>(),
      make_callee<ark::collective::all_reduce, ark::algo::two_shot, ark::dma::thread_copy<3>, i32,
                  ark::op::sum>(),
      make_callee<ark::collective::all_reduce, ark::algo::ring, ark::dma::proxy_engine<2>, i32,
                  ark::op::sum>(),
      make_callee<ark::collective::all_reduce, ark::algo::ring, ark::dma::ll_packet<8>, i32, ark::op::sum>(),
  };
  for (int world : {3, 4}) {
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      std::mt19937_64 rng(99); // the same sequence on every rank
      std::vector<i32> in, out;
      for (int call = 0; call < 1000; ++call) {
        const std::size_t count = rng() % 4097;
        const auto& f = callees[rng() % std::size(callees)];
        in.resize(count);
        out.assign(count + 4, -1);
        for (std::size_t i = 0; i < count; ++i) in[i] = input<i32, ark::op::sum>(call, rank, i);
        f.fn(c, in.data(), out.data(), count, 0);
        for (std::size_t i = 0; i < count; ++i) {
          i32 want = 0;
          for (int r = 0; r < world; ++r) want += input<i32, ark::op::sum>(call, r, i);
          bad[rank] += out[i] != want;
        }
        for (std::size_t i = count; i < count + 4; ++i) bad[rank] += out[i] != -1;
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("communicator: a 64 MB all-reduce, every algorithm") {
  const std::size_t count = std::size_t(64) << 20 >> 2; // 64 MB of floats per rank
  comm_t::config cfg;                                   // default slots (64 KB)
  test_world w(4, cfg);
  const callee<float> callees[] = {
      make_callee<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float,
                  ark::op::sum>(),
      make_callee<ark::collective::all_reduce, ark::algo::ring, ark::dma::thread_copy<4>, float,
                  ark::op::sum>(),
  };
  for (const auto& f : callees) {
    std::vector<std::size_t> bad(4, 0);
    w.run([&](comm_t& c, int rank) {
      // small integers: every partial sum is exact in float, so the result is too
      std::vector<float> in(count), out(count, -1.0f);
      for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i * 7 + rank * 13) % 101);
      f.fn(c, in.data(), out.data(), count, 0);
      for (std::size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < 4; ++r) want += static_cast<float>((i * 7 + r * 13) % 101);
        bad[rank] += out[i] != want;
      }
    });
    INFO("algorithm ", f.algorithm);
    for (int r = 0; r < 4; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("communicator: user-defined reduction ops") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  w.run([&](comm_t& c, int rank) {
    const std::size_t n = 1001;
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = input<float, ark::op::sum>(5, rank, i);
    c.all_reduce<ark::algo::ring, ark::dma::thread_copy<2>>(in.data(), out.data(), n, absmax{});
    for (std::size_t i = 0; i < n; ++i) {
      float want = input<float, ark::op::sum>(5, 0, i);
      for (int r = 1; r < 3; ++r) want = absmax{}(want, input<float, ark::op::sum>(5, r, i));
      bad[rank] += out[i] != want;
    }
    std::vector<std::int64_t> sq(n), res(n);
    for (std::size_t i = 0; i < n; ++i)
      sq[i] = static_cast<std::int64_t>(i + rank) * static_cast<std::int64_t>(i + rank);
    c.all_reduce<ark::algo::two_shot, ark::dma::ll_packet<4>>(sq.data(), res.data(), n, mean_square{});
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t want = 0;
      for (int r = 0; r < 3; ++r) want += static_cast<std::int64_t>(i + r) * static_cast<std::int64_t>(i + r);
      bad[rank] += res[i] != want / 3;
    }
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("communicator: scratch bytes are reported and user-provided scratch is used") {
  auto cfg = small_config();
  const std::size_t need = comm_t::required_scratch(3, cfg.team);
  CHECK(need > 0);
  std::vector<std::vector<std::byte>> scratch(3, std::vector<std::byte>(need + 256));
  test_world w(3, cfg);
  std::vector<std::size_t> bad(3, 0);
  // a communicator over user scratch, built inside the rank threads of a second group
  auto group = std::make_shared<ark::in_process_group>(3);
  w.run([&](comm_t& c, int rank) {
    CHECK(c.scratch_bytes() == need);
    auto mine = cfg;
    auto* p = scratch[rank].data();
    mine.scratch = p + (256 - reinterpret_cast<std::uintptr_t>(p) % 256) % 256;
    mine.scratch_size = need;
    comm_t user(ark::in_process_bootstrap(group, rank), mine);
    CHECK(user.team().base[rank] == static_cast<std::byte*>(mine.scratch));
    std::vector<float> in(777, static_cast<float>(rank + 1)), out(777);
    user.all_reduce(in.data(), out.data(), 777);
    for (float v : out) bad[rank] += v != 6.0f;
    auto small = cfg;
    small.scratch = mine.scratch;
    small.scratch_size = comm_t::required_scratch(1, cfg.team) - 1;
    CHECK_THROWS_AS(comm_t(ark::in_process_bootstrap(std::make_shared<ark::in_process_group>(1), 0), small),
                    ark::invalid_argument);
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("communicator: automatic slots fit the scratch budget; calls use the workers it holds") {
  auto cfg = small_config();
  cfg.team.workers = 6;
  cfg.team.max_depth = 4;
  cfg.team.slot_bytes = 0;
  cfg.team.p2p_workers = 2; // as many as explicit slots hold (their automatic count: test_layout.cpp)
  auto three = cfg.team;    // three workers' slots of the least automatic size, and a little more
  three.workers = 3;
  three.slot_bytes = ark::team_config::auto_slot_least;
  cfg.team.scratch_budget = comm_t::required_scratch(3, three) + 3 * 4096;
  const ark::layout l = ark::make_layout(3, cfg.team);
  REQUIRE(l.workers == 3);
  CHECK(l.slot_bytes >= ark::team_config::auto_slot_least);
  CHECK(l.total <= cfg.team.scratch_budget);
  test_world w(3, cfg);
  std::vector<std::size_t> bad(3, 0);
  std::vector<std::string> refusal(3);
  w.run([&](comm_t& c, int rank) {
    const ark::memory_report m = c.memory();
    CHECK(m.scratch == l.total);
    CHECK(m.workers == 3);
    CHECK(m.slot_bytes == l.slot_bytes);
    const std::size_t piece = l.slot_bytes / sizeof(i32); // a step's elements
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{999}, piece - 1, 3 * piece + 5, 7 * piece + 3}) {
      CAPTURE(n);
      std::vector<i32> in(n), out(n, -1), gathered(3 * n, -1), ring(n, -1);
      for (std::size_t i = 0; i < n; ++i) in[i] = (rank + 1) * static_cast<i32>(i % 13 + 1);
      c.all_reduce(in.data(), out.data(), n);
      c.all_reduce<ark::algo::ring, ark::dma::thread_copy<2>>(in.data(), ring.data(), n);
      c.all_gather(in.data(), gathered.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        bad[rank] += out[i] != 6 * static_cast<i32>(i % 13 + 1);
        bad[rank] += ring[i] != out[i];
        for (int r = 0; r < 3; ++r)
          bad[rank] += gathered[r * n + i] != (r + 1) * static_cast<i32>(i % 13 + 1);
      }
    }
    ark::call_options<host> four;
    four.workers = 4; // within team_config.workers, beyond what the budget holds
    std::vector<i32> in(8, 1), out(8, -1);
    refusal[rank] = message_of<ark::invalid_argument>(
        [&] { c.all_reduce(in.data(), out.data(), 8, ark::op::sum{}, four); });
    for (i32 v : out) bad[rank] += v != -1;
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(bad[r] == 0);
    CHECK(refusal[r].find("workers 4 exceeds team_config.workers 3 (the workers whose slots fit in "
                          "team_config.scratch_budget)") != std::string::npos);
  }
}

TEST_CASE("communicator: memory() reports what it holds") {
  for (const auto engine : {ark::engine_path::proxy, ark::engine_path::device_graphs}) {
    CAPTURE(static_cast<int>(engine));
    auto cfg = small_config(); // staging: the engine's queues are there
    cfg.engine = engine;
    test_world w(2, cfg);
    w.run([&](comm_t& c, int rank) {
      const ark::memory_report m = c.memory();
      CHECK(m.scratch == comm_t::required_scratch(2, cfg.team));
      CHECK_FALSE(m.scratch_is_users);
      CHECK(m.engine_queues > 0);
      CHECK(m.engine_queues_on_device == (engine == ark::engine_path::device_graphs));
      CHECK((m.graph_tables > 0) == (engine == ark::engine_path::device_graphs));
      CHECK(m.control > 0);
      CHECK(m.windows == 0);
      CHECK(m.streams == 4); // its own and the copy-engine all-reduce's three (no context shared)
      CHECK(m.device_bytes() ==
            m.scratch + (engine == ark::engine_path::device_graphs ? m.engine_queues + m.graph_tables : 0));
      CHECK(m.host_mapped_bytes() == m.control + (engine == ark::engine_path::proxy ? m.engine_queues : 0));
      std::vector<float> buf(1000 + rank);
      c.register_buffer(buf.data(), 1000 * sizeof(float));
      CHECK(c.memory().windows == 1);
      c.deregister_buffer(buf.data());
      CHECK(c.memory().windows == 0);
    });
  }
}

TEST_CASE("communicator: a rank that cannot get its scratch fails every rank at once, saying what it needs") {
  auto cfg = small_config();
  cfg.team.slot_bytes = std::size_t{1} << 44; // past any address space
  const std::size_t need = comm_t::required_scratch(3, cfg.team);
  auto group = std::make_shared<ark::in_process_group>(3, 20s);
  std::vector<std::string> msgs(3);
  std::vector<std::size_t> needed(3), took_ms(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        comm_t c(ark::in_process_bootstrap(group, r), cfg);
      } catch (const ark::out_of_memory& e) {
        msgs[r] = e.what();
        needed[r] = e.needed();
      } catch (const std::exception& e) {
        msgs[r] = std::string("another error: ") + e.what();
      }
      took_ms[r] = static_cast<std::size_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
              .count());
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CAPTURE(msgs[r]);
    CHECK(contains(msgs[r], "communicator: rank 0 could not allocate its symmetric scratch of " +
                                std::to_string(need) + " bytes"));
    CHECK(contains(msgs[r], "lower team_config.slot_bytes"));
    CHECK(needed[r] == need);
    CHECK(took_ms[r] < 10000); // told in the exchange, not left to the bootstrap's timeout
  }
}

TEST_CASE("communicator: registered buffers; an unregistered buffer is an error") {
  test_world w(2);
  std::vector<std::string> errors(2);
  std::vector<char> ok(2, 0); // one byte per rank (vector<bool> packs both into one word: a race)
  w.run([&](comm_t& c, int rank) {
    std::vector<float> buf(64, static_cast<float>(rank)), other(64);
    try {
      c.remote(buf.data(), 1 - rank);
    } catch (const ark::invalid_argument& e) {
      errors[rank] = e.what();
    }
    const ark::window_view& win = c.register_buffer(buf.data(), buf.size() * sizeof(float));
    auto* peer = static_cast<float*>(c.remote(buf.data() + 3, 1 - rank));
    ok[rank] = win.bytes == 256 && peer == reinterpret_cast<float*>(win.base[1 - rank]) + 3 &&
               c.remote(buf.data(), rank) == buf.data();
    CHECK_THROWS_AS(c.remote(other.data(), 0), ark::invalid_argument);
    CHECK_THROWS_AS(c.remote(buf.data(), 2), ark::invalid_argument);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(ok[r] != 0);
    CHECK(errors[r].find("is not inside a buffer registered with this communicator") != std::string::npos);
  }
}

TEST_CASE("device-side API: a persistent loop of compute and all-reduce with no host involvement") {
  // The host analogue of examples/02: one launch; every worker loops over iterations, computing
  // its share and all-reducing it through the device handle.
  test_world w(4);
  std::vector<std::size_t> bad(4, 0);
  w.run([&](comm_t& c, int rank) {
    const std::size_t n = 5000;
    std::vector<std::int64_t> data(n);
    ark_test::persistent_loop<ark::dma::thread_copy<4>, ark::device_comm<host>> loop{
        c.device_handle(), data.data(), n, 25, rank};
    c.launch<ark::dma::thread_copy<4>>(loop, 3);
    for (std::size_t i = 0; i < n; ++i) bad[rank] += data[i] != ark_test::persistent_loop_expected(i, 25, 4);
  });
  for (int r = 0; r < 4; ++r) CHECK(bad[r] == 0);
}
