// Fused groups (collectives/fused.hpp; communicator::group(calls...)): any mix of collectives
// and sends and receives is one launch. Every collective kind, several dtypes and ops, odd and
// zero sizes, in place, a ring shift with LL-sized and large messages and a send to itself, at
// worlds 1-5, repeated, with poisoned guards; sends alone over named backends; block limits;
// order with the batches of an open group_start; refusals before anything launches (each
// call's own checks, buffers another call writes, sends without workers), and a send without
// its receive a timeout.
#include "../support/harness.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace ark_test;

namespace {

constexpr std::size_t guard = 8;

/// Element i of rank r's input to call `which` in round k: exact in every dtype used here.
template <class T>
T v(int r, std::size_t i, int which, int k) {
  return T(static_cast<float>((r + 1) * 16 + static_cast<int>(i % 61) + which * 3 + k));
}

template <class T>
std::size_t poisoned_wrong(const std::vector<T>& x, std::size_t from, T poison) {
  std::size_t bad = 0;
  for (std::size_t i = from; i < x.size(); ++i) bad += !(x[i] == poison);
  return bad;
}

/// One fused group of every collective kind and a ring shift (one LL-sized message, one large,
/// one to itself) on rank `rank`, round k. Returns the wrong elements; `launches` gets the
/// launches it made.
std::size_t every_kind_wrong(comm_t& c, int rank, int k, std::uint64_t& launches) {
  using i32 = std::int32_t;
  const int world = c.world();
  const auto w = static_cast<std::size_t>(world);
  const int root = k % world, next = (rank + 1) % world, prev = (rank + world - 1) % world;
  const std::size_t n = 1001, m = 333, a2a = 5, big = 20000; // big: 80 KB, over the LL bound
  std::vector<float> ar_in(n), ar_out(n + guard, -1.0f), red_out(m + guard, -1.0f);
  std::vector<i32> ip(7), bc(m + guard, -1), a2a_in(a2a * w), a2a_out(a2a * w + guard, -1);
  std::vector<double> rs_in(m * w), rs_out(m + guard, -1.0);
  std::vector<float> ag_in(m), ag_out(m * w + guard, -1.0f);
  std::vector<i32> g_in(m), g_out(m * w + guard, -1), sc_in(m * w), sc_out(m + guard, -1);
  std::vector<i32> small_in(100), small_out(100 + guard, -1), big_in(big), big_out(big + guard, -1);
  std::vector<i32> self_in(9), self_out(9 + guard, -1);
  std::vector<float> empty_out(guard, -1.0f);
  for (std::size_t i = 0; i < n; ++i) ar_in[i] = v<float>(rank, i, 0, k);
  for (std::size_t i = 0; i < ip.size(); ++i) ip[i] = v<i32>(rank, i, 1, k);
  for (std::size_t i = 0; i < m * w; ++i)
    rs_in[i] = v<double>(rank, i, 2, k), sc_in[i] = v<i32>(rank, i, 6, k);
  for (std::size_t i = 0; i < m; ++i) ag_in[i] = v<float>(rank, i, 3, k), g_in[i] = v<i32>(rank, i, 5, k);
  std::vector<i32> bc_in(m);
  for (std::size_t i = 0; i < m; ++i) bc_in[i] = v<i32>(root, i, 4, k);
  for (std::size_t i = 0; i < a2a * w; ++i) a2a_in[i] = v<i32>(rank, i, 7, k);
  for (std::size_t i = 0; i < small_in.size(); ++i) small_in[i] = v<i32>(rank, i, 8, k);
  for (std::size_t i = 0; i < big; ++i) big_in[i] = v<i32>(rank, i, 9, k);
  for (std::size_t i = 0; i < self_in.size(); ++i) self_in[i] = v<i32>(rank, i, 10, k);

  namespace calls = ark::calls;
  const std::uint64_t before = c.launches();
  // a pair's sends and receives in the same order on both sides (here: the large one first),
  // receives before sends or after, anywhere among the collectives
  c.group(
      calls::recv(big_out.data(), big, prev), calls::all_reduce(ar_in.data(), ar_out.data(), n),
      calls::all_reduce(ip.data(), ip.data(), ip.size()), calls::send(big_in.data(), big, next),
      calls::reduce_scatter(rs_in.data(), rs_out.data(), m, ark::op::max{}),
      calls::recv(small_out.data(), small_in.size(), prev), calls::all_gather(ag_in.data(), ag_out.data(), m),
      calls::broadcast(bc_in.data(), bc.data(), m, root),
      calls::reduce(ar_in.data(), red_out.data(), m, root, ark::op::min{}),
      calls::all_to_all(a2a_in.data(), a2a_out.data(), a2a),
      calls::gather(g_in.data(), g_out.data(), m, root), calls::scatter(sc_in.data(), sc_out.data(), m, root),
      calls::send(small_in.data(), small_in.size(), next), calls::recv(self_out.data(), 9, rank),
      calls::send(self_in.data(), 9, rank), calls::all_reduce(ar_in.data(), empty_out.data(), 0));
  c.synchronize();
  launches = c.launches() - before;

  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float s = 0;
    for (int r = 0; r < world; ++r) s += v<float>(r, i, 0, k);
    bad += ar_out[i] != s;
  }
  for (std::size_t i = 0; i < ip.size(); ++i) {
    i32 s = 0;
    for (int r = 0; r < world; ++r) s += v<i32>(r, i, 1, k);
    bad += ip[i] != s;
  }
  for (std::size_t i = 0; i < m; ++i) {
    double mx = v<double>(0, rank * m + i, 2, k);
    float mn = v<float>(0, i, 0, k);
    for (int r = 1; r < world; ++r)
      mx = std::max(mx, v<double>(r, rank * m + i, 2, k)), mn = std::min(mn, v<float>(r, i, 0, k));
    bad += rs_out[i] != mx;
    bad += bc[i] != v<i32>(root, i, 4, k);
    bad += sc_out[i] != v<i32>(root, rank * m + i, 6, k);
    if (rank == root) bad += red_out[i] != mn;
    for (int r = 0; r < world; ++r) {
      bad += ag_out[r * m + i] != v<float>(r, i, 3, k);
      if (rank == root) bad += g_out[r * m + i] != v<i32>(r, i, 5, k);
    }
  }
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < a2a; ++i) bad += a2a_out[r * a2a + i] != v<i32>(r, rank * a2a + i, 7, k);
  for (std::size_t i = 0; i < small_in.size(); ++i) bad += small_out[i] != v<i32>(prev, i, 8, k);
  for (std::size_t i = 0; i < big; ++i) bad += big_out[i] != v<i32>(prev, i, 9, k);
  for (std::size_t i = 0; i < self_in.size(); ++i) bad += self_out[i] != self_in[i];
  bad += poisoned_wrong(ar_out, n, -1.0f) + poisoned_wrong(rs_out, m, -1.0) + poisoned_wrong(bc, m, -1) +
         poisoned_wrong(sc_out, m, -1) + poisoned_wrong(ag_out, m * w, -1.0f) +
         poisoned_wrong(a2a_out, a2a * w, -1) + poisoned_wrong(small_out, small_in.size(), -1) +
         poisoned_wrong(big_out, big, -1) + poisoned_wrong(self_out, 9, -1) +
         poisoned_wrong(empty_out, 0, -1.0f);
  bad += poisoned_wrong(red_out, rank == root ? m : 0, -1.0f) +
         poisoned_wrong(g_out, rank == root ? m * w : 0, -1);
  return bad;
}

} // namespace

TEST_CASE("fused groups: every collective kind, sends and receives (LL-sized, large, to itself) in one "
          "launch; results exact, worlds 1-5, repeated") {
  check_rounds({1, 2, 3, 4, 5}, 3, 1, every_kind_wrong);
}

TEST_CASE("fused groups: sends and receives alone over named backends and depths, all pairs with "
          "uneven counts (zeros too); collectives alone; within max_ctas") {
  for (int world : {2, 3, 5}) {
    CAPTURE(world);
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      namespace calls = ark::calls;
      auto sent = [](int from, int to, std::size_t i) {
        return static_cast<std::uint8_t>((from * 40 + to * 7 + static_cast<int>(i)) % 251);
      };
      auto count = [&](int from, int to) {
        return static_cast<std::size_t>(((from * 3 + to * 5) % 4) * 301);
      };
      auto all_pairs = [&]<class B>(B) {
        std::vector<std::vector<std::uint8_t>> in(world), out(world);
        for (int p = 0; p < world; ++p) {
          in[p].resize(count(rank, p));
          for (std::size_t i = 0; i < in[p].size(); ++i) in[p][i] = sent(rank, p, i);
          out[p].assign(count(p, rank) + guard, 0xff);
        }
        // a fixed list (the peers' ranks are values): world 5 at most
        auto s = [&](int p) { return calls::send<B>(in[p].data(), in[p].size(), p); };
        auto r = [&](int p) { return calls::recv<B>(out[p].data(), count(p, rank), p); };
        if (world == 2) c.group(s(0), r(0), s(1), r(1));
        if (world == 3) c.group(r(2), s(0), r(0), s(1), r(1), s(2));
        if (world == 5) c.group(s(0), r(0), s(1), r(1), s(2), r(2), s(3), r(3), s(4), r(4));
        c.synchronize();
        for (int p = 0; p < world; ++p) {
          for (std::size_t i = 0; i < count(p, rank); ++i) bad[rank] += out[p][i] != sent(p, rank, i);
          bad[rank] += poisoned_wrong(out[p], count(p, rank), std::uint8_t(0xff));
        }
      };
      all_pairs(ark::dma::thread_copy<1>{});
      all_pairs(ark::dma::thread_copy<4>{});
      all_pairs(ark::dma::ll_packet<2>{});
      all_pairs(ark::dma::proxy_engine<2>{}); // the CPU proxy serves the engine's queues
      // collectives alone, within two blocks
      ark::call_options<host> two;
      two.max_ctas = 2;
      const std::size_t block = 5000 / static_cast<std::size_t>(world);
      std::vector<float> a(5000, float(rank + 1)), g(block, float(rank + 1)), b(block * world + guard, -1.0f);
      c.group(two, calls::all_reduce(a.data(), a.data(), a.size()),
              calls::all_gather(g.data(), b.data(), block));
      c.synchronize();
      const float s = float(world * (world + 1) / 2);
      for (float x : a) bad[rank] += x != s;
      for (std::size_t i = 0; i < block * world; ++i) bad[rank] += b[i] != float(i / block + 1);
      bad[rank] += poisoned_wrong(b, block * world, -1.0f);
      // a collective and a ring shift within two blocks: one for each
      std::vector<std::int64_t> x(3000, rank), y(3000 + guard, -1), z(700, rank + 7), t(700 + guard, -1);
      c.group(two, calls::all_reduce(x.data(), y.data(), x.size()),
              calls::send(z.data(), z.size(), (rank + 1) % world),
              calls::recv(t.data(), z.size(), (rank + world - 1) % world));
      c.synchronize();
      for (std::size_t i = 0; i < x.size(); ++i) bad[rank] += y[i] != world * (world - 1) / 2;
      for (std::size_t i = 0; i < z.size(); ++i) bad[rank] += t[i] != (rank + world - 1) % world + 7;
      bad[rank] +=
          poisoned_wrong(y, x.size(), std::int64_t(-1)) + poisoned_wrong(t, z.size(), std::int64_t(-1));
    });
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(bad[r] == 0);
    }
  }
}

TEST_CASE("fused groups: ranks with and without sends plan their collectives alike within max_ctas; "
          "call_options::workers sets both halves") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  std::vector<std::string> msg(3);
  w.run([&](comm_t& c, int rank) {
    namespace calls = ark::calls;
    ark::call_options<host> three;
    three.max_ctas = 3;
    std::vector<float> x(30000, float(rank + 1)), y(30000 + guard, -1.0f), s(500, 7.0f),
        r(500 + guard, -1.0f);
    for (int k = 0; k < 2; ++k) {
      if (rank == 0)
        c.group(three, calls::all_reduce(x.data(), y.data(), x.size()), calls::send(s.data(), s.size(), 1));
      else if (rank == 1)
        c.group(three, calls::recv(r.data(), s.size(), 0), calls::all_reduce(x.data(), y.data(), x.size()));
      else
        c.group(three, calls::all_reduce(x.data(), y.data(), x.size())); // no send of its own
      c.synchronize();
      for (std::size_t i = 0; i < x.size(); ++i) bad[rank] += y[i] != 6.0f;
      bad[rank] += poisoned_wrong(y, x.size(), -1.0f);
      if (rank == 1) {
        for (std::size_t i = 0; i < s.size(); ++i) bad[rank] += r[i] != 7.0f;
        bad[rank] += poisoned_wrong(r, s.size(), -1.0f);
      }
    }
    ark::call_options<host> two_each = three;
    two_each.workers = 2; // two for the all-reduce and two for the sends: more than three blocks
    msg[rank] = message_of<ark::invalid_argument>([&] {
      c.group(two_each, calls::all_reduce(x.data(), y.data(), x.size()), calls::send(s.data(), 1, rank),
              calls::recv(r.data(), 1, rank));
    });
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(msg[r]);
    CHECK(bad[r] == 0);
    CHECK(
        contains(msg[r], "group: call 0, planned within 1 blocks: all_reduce: workers 2 exceeds max_ctas 1"));
  }
}

TEST_CASE("fused groups: sends and receives over the copy engine served by device graphs (host model), "
          "beside a collective") {
  auto cfg = small_config();
  cfg.engine = ark::engine_path::device_graphs;
  test_world w(3, cfg);
  std::vector<std::size_t> bad(3, 0);
  w.run([&](comm_t& c, int rank) {
    using B = ark::dma::proxy_engine<4>;
    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    std::vector<std::int32_t> x(777, rank + 1), y(777 + guard, -1), s(2000, rank * 10), r(2000 + guard, -1);
    for (int k = 0; k < 3; ++k) {
      c.group(ark::calls::recv<B>(r.data(), s.size(), prev),
              ark::calls::all_reduce(x.data(), y.data(), x.size()),
              ark::calls::send<B>(s.data(), s.size(), next));
      c.synchronize();
      for (std::size_t i = 0; i < x.size(); ++i) bad[rank] += y[i] != 6;
      for (std::size_t i = 0; i < s.size(); ++i) bad[rank] += r[i] != prev * 10;
      bad[rank] += poisoned_wrong(y, x.size(), -1) + poisoned_wrong(r, s.size(), -1);
    }
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("fused groups: inside group_start a fused group runs after the batches before it, and "
          "before the ones after") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  std::vector<std::uint64_t> launches(3, 0);
  w.run([&](comm_t& c, int rank) {
    std::vector<std::int32_t> a(100, rank + 1), b(100 + guard, -1);
    const std::uint64_t before = c.launches();
    c.group_start();
    c.all_reduce(a.data(), a.data(), a.size());                    // 6
    c.group(ark::calls::all_reduce(a.data(), b.data(), a.size())); // 18, from a after the first
    c.all_reduce(b.data(), b.data(), a.size());                    // 54, after the fused group
    c.group_end();
    c.synchronize();
    launches[rank] = c.launches() - before;
    for (std::size_t i = 0; i < a.size(); ++i) bad[rank] += a[i] != 6 || b[i] != 54;
    bad[rank] += poisoned_wrong(b, a.size(), -1);
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(bad[r] == 0);
    CHECK(launches[r] == 3);
  }
}

TEST_CASE("fused groups: refused whole before anything launches, nothing written; a send without "
          "its receive is a timeout") {
  test_world w(2);
  std::vector<std::vector<std::string>> msgs(2);
  std::vector<std::size_t> touched(2, 0);
  std::vector<std::uint64_t> launches(2, 0);
  w.run([&](comm_t& c, int rank) {
    namespace calls = ark::calls;
    std::vector<float> a(64, 1.0f), b(128, -1.0f);
    const float* none = nullptr;
    const std::uint64_t before = c.launches();
    auto refused = [&](auto&& f) { msgs[rank].push_back(message_of<ark::invalid_argument>(f)); };
    refused(
        [&] { c.group(calls::all_reduce(a.data(), b.data(), 64), calls::all_gather(none, b.data(), 1)); });
    refused([&] { // the all-reduce writes what the send reads
      c.group(calls::all_reduce(a.data(), b.data(), 64), calls::send(b.data() + 10, 4, 1 - rank),
              calls::recv(a.data(), 4, 1 - rank));
    });
    refused([&] { c.group(calls::send(a.data(), 4, 2), calls::recv(b.data(), 4, 1 - rank)); });
    refused([&] { c.group(calls::send(a.data(), 4, rank)); }); // to itself without its receive
    refused([&] { c.group(calls::broadcast(a.data(), b.data(), 64, 5)); });
    ark::call_options<host> none_blocks;
    none_blocks.max_ctas = 0;
    refused([&] { c.group(none_blocks, calls::all_reduce(a.data(), b.data(), 64)); });
    ark::call_options<host> one_block;
    one_block.max_ctas = 1;
    refused([&] {
      c.group(one_block, calls::all_reduce(a.data(), b.data(), 64), calls::send(a.data(), 4, 1 - rank),
              calls::recv(b.data() + 64, 4, 1 - rank));
    });
    launches[rank] = c.launches() - before;
    for (float x : b) touched[rank] += x != -1.0f;
    for (float x : a) touched[rank] += x != 1.0f;
  });
  const char* expect[] = {"group (call 1, all_gather): send buffer is null",
                          "call 0 writes a buffer that call 1 reads",
                          "group (call 0, send): peer 2 is outside [0, 2)",
                          "a send to this rank needs its receive",
                          "root 5",
                          "max_ctas = 0",
                          "needs two blocks at least"};
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE(msgs[r].size() == std::size(expect));
    for (std::size_t i = 0; i < msgs[r].size(); ++i) {
      CAPTURE(msgs[r][i]);
      CHECK(contains(msgs[r][i], expect[i]));
    }
    CHECK(launches[r] == 0);
    CHECK(touched[r] == 0);
  }

  auto cfg = small_config();
  cfg.timeout = std::chrono::milliseconds(400);
  test_world t(2, cfg);
  const auto errs = t.try_run([&](comm_t& c, int rank) {
    std::vector<int> in(100, 7);
    if (rank == 0) c.group(ark::calls::send(in.data(), in.size(), 1));
    c.synchronize();
  });
  REQUIRE(errs[0]);
  CHECK(message_of<ark::timeout_error>([&] { std::rethrow_exception(errs[0]); }) != "no exception");
  CHECK_FALSE(errs[1]);

  auto no_p2p = small_config();
  no_p2p.team.p2p_workers = 0;
  test_world u(2, no_p2p);
  std::vector<std::string> m(2);
  u.run([&](comm_t& c, int rank) {
    std::vector<int> x(10, 1), y(10, -1);
    m[rank] = message_of<ark::invalid_argument>([&] {
      c.group(ark::calls::all_reduce(x.data(), x.data(), 10), ark::calls::send(x.data(), 10, 1 - rank),
              ark::calls::recv(y.data(), 10, 1 - rank));
    });
  });
  for (int r = 0; r < 2; ++r) CHECK(contains(m[r], "p2p_workers is 0"));
}
