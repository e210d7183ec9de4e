// Point-to-point (algorithms/p2p.hpp; communicator::send, recv, group_start/group_end,
// all_to_allv; device_comm::p2p, send, recv): only the ranks a send names take part; a group of
// any mix completes in whatever order each rank lists it. Ring shifts, pairs that send to and
// receive from each other while other ranks stay out, all pairs with uneven counts (zeros
// included), over every backend and depth at worlds 1-5; every dtype; calls back to back with
// collectives; from the user's own kernel; bad input refused before anything runs; a send
// without its receive a timeout, counts that differ a mismatch for the receiver, nothing stored.
// Groups of collectives (communicator::group_start): batched one launch a batch, in call order,
// before the group's sends and receives; batches break where calls differ.
#include "../support/harness.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

using namespace ark_test;

namespace {

/// Element i of what rank `from` sends rank `to` (its k-th message to it): exact in every dtype.
template <class T>
T value(int from, int to, std::size_t i, int k = 0) {
  return T(static_cast<float>((from * 13 + to * 7 + k * 5 + static_cast<int>(i % 79)) % 97));
}

template <class T>
bool same(T a, T b) {
  return static_cast<double>(static_cast<float>(a)) == static_cast<double>(static_cast<float>(b));
}

constexpr std::size_t guard = 8;

/// Elements rank p sends rank q in all_to_allv round `k`: zero for some pairs.
std::size_t uneven(int p, int q, int k, std::size_t scale) { return ((p * 3 + q * 5 + k) % 4) * scale; }

/// One round of each pattern on rank `rank` over backend B; returns the wrong elements.
template <class T, class B>
std::size_t patterns_wrong(comm_t& c, int rank, std::size_t n, int k) {
  const int world = c.world();
  const T poison = T(-1.0f);
  std::size_t bad = 0;
  { // ring shift: send to the next rank, receive from the previous, in one group
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    std::vector<T> out(n + guard, poison), in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = value<T>(rank, next, i, k);
    c.group_start();
    if (rank % 2) { // half the ranks list the receive first
      c.recv<B>(out.data(), n, prev);
      c.send<B>(in.data(), n, next);
    } else {
      c.send<B>(in.data(), n, next);
      c.recv<B>(out.data(), n, prev);
    }
    c.group_end();
    c.synchronize();
    for (std::size_t i = 0; i < n; ++i) bad += !same(out[i], value<T>(prev, rank, i, k));
    for (std::size_t i = n; i < out.size(); ++i) bad += !same(out[i], poison);
  }
  { // pairs (0, 1), (2, 3), ...: each sends to and receives from the other; an odd world's last
    // rank makes no call at all
    const int peer = rank ^ 1;
    if (peer < world) {
      std::vector<T> out(n + guard, poison), in(n);
      for (std::size_t i = 0; i < n; ++i) in[i] = value<T>(rank, peer, i, k + 1);
      c.group_start();
      c.recv<B>(out.data(), n, peer);
      c.send<B>(in.data(), n, peer);
      c.group_end();
      c.synchronize();
      for (std::size_t i = 0; i < n; ++i) bad += !same(out[i], value<T>(peer, rank, i, k + 1));
      for (std::size_t i = n; i < out.size(); ++i) bad += !same(out[i], poison);
      if (rank == 0 && world > 1) { // two messages in a row to one peer, each alone
        c.send<B>(in.data(), n, 1);
        c.send<B>(in.data(), n / 2, 1);
      } else if (rank == 1) {
        std::vector<T> a(n, poison), b(n / 2 + guard, poison);
        c.recv<B>(a.data(), n, 0);
        c.recv<B>(b.data(), n / 2, 0);
        c.synchronize();
        for (std::size_t i = 0; i < n; ++i) bad += !same(a[i], value<T>(0, 1, i, k + 1));
        for (std::size_t i = 0; i < n / 2; ++i) bad += !same(b[i], value<T>(0, 1, i, k + 1));
        for (std::size_t i = n / 2; i < b.size(); ++i) bad += !same(b[i], poison);
      }
      c.synchronize();
    }
  }
  { // all pairs, uneven counts, this rank's own block copied locally
    std::vector<std::size_t> sc(world), so(world), rc(world), ro(world);
    std::size_t ns = 0, nr = 0;
    for (int p = 0; p < world; ++p) {
      sc[p] = uneven(rank, p, k, n), so[p] = ns, ns += sc[p] + 3; // gaps between the blocks
      rc[p] = uneven(p, rank, k, n), ro[p] = nr, nr += rc[p] + 3;
    }
    std::vector<T> in(ns), out(nr + guard, poison);
    for (int p = 0; p < world; ++p)
      for (std::size_t i = 0; i < sc[p]; ++i) in[so[p] + i] = value<T>(rank, p, i, k + 2);
    c.all_to_allv<B>(in.data(), sc.data(), so.data(), out.data(), rc.data(), ro.data());
    c.synchronize();
    std::vector<bool> result(out.size(), false);
    for (int q = 0; q < world; ++q)
      for (std::size_t i = 0; i < rc[q]; ++i) {
        bad += !same(out[ro[q] + i], value<T>(q, rank, i, k + 2));
        result[ro[q] + i] = true;
      }
    for (std::size_t i = 0; i < out.size(); ++i) bad += !result[i] && !same(out[i], poison);
  }
  return bad;
}

template <class B>
void patterns(const std::vector<int>& worlds, typename comm_t::config cfg = small_config()) {
  for (int world : worlds) {
    CAPTURE(world);
    INFO("backend ", B::id, " depth ", B::depth);
    test_world w(world, cfg);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      int k = 0;
      for (std::size_t n : {0, 1, 7, 67, 1000, 3001})
        bad[rank] += patterns_wrong<std::int32_t, B>(c, rank, n, k++);
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

/// A ring shift from the user's own (host-platform) kernel, as a GPU kernel would make it.
struct ring_kernel {
  ark::device_comm<host> comm;
  const std::int32_t* in;
  std::int32_t* out;
  std::size_t n;
  template <class Ctx>
  bool operator()(const Ctx& ctx) const {
    const int r = comm.rank(), w = comm.world();
    ark::p2p_ops ops;
    ops.op[0] = ark::make_p2p_op(ark::p2p_op::send, in, n, (r + 1) % w);
    ops.op[1] = ark::make_p2p_op(ark::p2p_op::recv, out, n, (r + w - 1) % w);
    ops.n = 2;
    return comm.p2p<ark::dma::ll_packet<2>>(ctx.g, ctx.worker, ctx.workers, ops);
  }
};

} // namespace

TEST_CASE("send/recv: ring shifts, pairs alone, all pairs uneven; thread copies, every depth, worlds 1-5") {
  patterns<ark::dma::automatic>({1, 2, 3, 4, 5});
  patterns<ark::dma::thread_copy<1>>({2, 3, 5});
  patterns<ark::dma::thread_copy<8>>({2, 4});
}

TEST_CASE(
    "send/recv: the automatic backend classes each operation by its size, a group of both in two launches") {
  auto cfg = small_config();
  cfg.tuning.ll_max_bytes = 256; // 0 to 67 int32 over LL packets, 1000 and 3001 over thread copies
  patterns<ark::dma::automatic>({2, 3, 5}, cfg);
}

TEST_CASE("send/recv: the same over LL packets and the copy engine (CPU proxy, device-graph model)") {
  patterns<ark::dma::ll_packet<1>>({2, 3, 5});
  patterns<ark::dma::ll_packet<8>>({2, 4});
  patterns<ark::dma::proxy_engine<2>>({2, 3, 5});
  auto cfg = small_config();
  cfg.engine = ark::engine_path::device_graphs;
  patterns<ark::dma::proxy_engine<4>>({3}, cfg);
}

TEST_CASE("send/recv: every dtype, many calls back to back with collectives, several workers") {
  auto cfg = small_config();
  cfg.team.p2p_workers = 3;
  test_world w(3, cfg);
  std::vector<std::size_t> bad(3, 0);
  w.run([&](comm_t& c, int rank) {
    for (int k = 0; k < 20; ++k) {
      const std::size_t n = 1 + static_cast<std::size_t>(k) * 97;
      bad[rank] += patterns_wrong<float, ark::dma::automatic>(c, rank, n, k);
      bad[rank] += patterns_wrong<double, ark::dma::thread_copy<2>>(c, rank, n, k);
      bad[rank] += patterns_wrong<ark::fp16, ark::dma::ll_packet<4>>(c, rank, n, k);
      bad[rank] += patterns_wrong<ark::bf16, ark::dma::automatic>(c, rank, n, k);
      bad[rank] += patterns_wrong<std::uint8_t, ark::dma::proxy_engine<1>>(c, rank, n, k);
      bad[rank] += patterns_wrong<std::int64_t, ark::dma::automatic>(c, rank, n, k);
      std::vector<std::int32_t> a(n, rank + 1), r(n, -1);
      c.all_reduce(a.data(), r.data(), n);
      c.synchronize();
      for (auto v : r) bad[rank] += v != 6;
    }
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("send/recv: device-side, a ring shift from the user's own kernel, every worker") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      for (std::size_t n : {0, 5, 3000}) {
        std::vector<std::int32_t> in(n), out(n, -1);
        for (std::size_t i = 0; i < n; ++i) in[i] = value<std::int32_t>(rank, (rank + 1) % world, i);
        c.launch<ark::dma::ll_packet<2>>(ring_kernel{c.device_handle(), in.data(), out.data(), n},
                                         c.team().lay.p2p);
        c.synchronize();
        const int prev = (rank + world - 1) % world;
        for (std::size_t i = 0; i < n; ++i) bad[rank] += out[i] != value<std::int32_t>(prev, rank, i);
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("send/recv: bad arguments are refused before anything runs, nothing written") {
  test_world w(2);
  std::vector<std::vector<std::string>> msgs(2);
  std::vector<std::size_t> touched(2, 0);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> buf(64, -2.0f);
    auto& m = msgs[rank];
    const float* none = nullptr;
    m.push_back(message_of<ark::invalid_argument>([&] { c.send(buf.data(), 4, 2); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.recv(buf.data(), 4, -1); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.send(none, 4, 1 - rank); }));
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.recv(reinterpret_cast<float*>(reinterpret_cast<char*>(buf.data()) + 1), 4, 1 - rank); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.send(buf.data(), 4, rank); })); // no receive
    m.push_back(message_of<ark::invalid_argument>([&] { c.group_end(); }));
    // inside a group: a refused operation stays out of it; the group still runs
    const int peer = 1 - rank;
    c.group_start();
    c.send(buf.data(), 4, peer);
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.recv<ark::dma::ll_packet<2>>(buf.data() + 8, 4, peer); }));
    ark::call_options<host> other;
    other.timeout = std::chrono::seconds(3);
    m.push_back(message_of<ark::invalid_argument>([&] { c.recv(buf.data() + 8, 4, peer, other); }));
    c.recv(buf.data() + 8, 4, peer);
    c.group_end();
    m.push_back(message_of<ark::invalid_argument>([&] {
      c.group_start();
      c.send(buf.data(), 1, rank); // to this rank, without its receive: refused when the group ends
      c.group_end();
    }));
    ark::call_options<host> none_ctas;
    none_ctas.max_ctas = 0;
    m.push_back(message_of<ark::invalid_argument>([&] { c.send(buf.data(), 4, peer, none_ctas); }));
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.send<ark::dma::thread_copy<9>>(buf.data(), 4, peer); }));
    c.group_start();
    for (int i = 0; i < 32; ++i) c.recv(buf.data(), 0, peer), c.send(buf.data(), 0, peer);
    m.push_back(message_of<ark::invalid_argument>([&] { c.send(buf.data(), 0, peer); }));
    c.group_end(); // the 64 it holds
    c.synchronize();
    for (float v : buf) touched[rank] += v != -2.0f;
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(touched[r] == 0);
    const auto& m = msgs[r];
    REQUIRE(m.size() == 12);
    CHECK(contains(m[0], "send: peer 2 is outside [0, 2)"));
    CHECK(contains(m[1], "recv: peer -1 is outside"));
    CHECK(contains(m[2], "send: buffer is null"));
    CHECK(contains(m[3], "not aligned"));
    CHECK(contains(m[4], "needs its receive"));
    CHECK(contains(m[5], "no group_start"));
    CHECK(contains(m[6], "one backend"));
    CHECK(contains(m[7], "share their options"));
    CHECK(contains(m[8], "needs its receive"));
    CHECK(contains(m[9], "max_ctas = 0"));
    CHECK(contains(m[10], "max_depth"));
    CHECK(contains(m[11], "at most 64"));
  }
}

TEST_CASE(
    "send/recv: a send without its receive is a timeout; counts or dtypes that differ a mismatch for the "
    "receiver, nothing stored, and a timeout for the sender") {
  auto cfg = small_config();
  cfg.timeout = std::chrono::milliseconds(400);
  for (int mode : {0, 1, 2}) { // 0: no receive, 1: counts differ, 2: dtypes differ
    CAPTURE(mode);
    test_world w(3, cfg);
    std::vector<std::size_t> touched(3, 0);
    const auto errs = w.try_run([&](comm_t& c, int rank) {
      if (rank == 2) return; // takes no part
      std::vector<std::int32_t> buf(300, rank == 0 ? 7 : -5);
      if (rank == 0)
        c.send(buf.data(), 200, 1);
      else if (mode == 1)
        c.recv(buf.data(), 201, 0);
      else if (mode == 2)
        c.recv(reinterpret_cast<float*>(buf.data()), 200, 0);
      try {
        c.synchronize();
      } catch (...) {
        if (rank == 1)
          for (auto v : buf) touched[rank] += v != -5;
        throw;
      }
    });
    CHECK_FALSE(errs[2]);
    for (int r = 0; r < (mode == 0 ? 1 : 2); ++r) {
      CAPTURE(r);
      REQUIRE(errs[r]);
      try {
        std::rethrow_exception(errs[r]);
      } catch (const ark::timeout_error& e) { // the sender: nobody tells it
        CHECK(r == 0);
      } catch (const ark::mismatch_error& e) {
        CHECK(r == 1);
        CHECK(contains(e.what(), mode == 1 ? "count" : "dtype"));
      } catch (const std::exception& e) {
        FAIL_CHECK("unexpected: " << std::string(e.what()));
      }
    }
    if (mode == 0) CHECK_FALSE(errs[1]);
    CHECK(touched[1] == 0);
  }
}

namespace {

/// One group of mixed calls on rank `rank` (round k): five all-reduces of assorted sizes (one
/// empty, one in place), a reduce-scatter, two all-gathers, a broadcast, a reduce, a ring shift.
/// Returns the wrong elements; `launches` gets the launches the group made.
std::size_t mixed_group_wrong(comm_t& c, int rank, int k, std::uint64_t& launches) {
  using i32 = std::int32_t;
  const int world = c.world();
  const auto w = static_cast<std::size_t>(world);
  auto v = [&](int r, std::size_t i, int which) {
    return static_cast<i32>((r + 1) * 1000 + i % 997 + which * 7 + k);
  };
  auto sum = [&](std::size_t i, int which) {
    i32 s = 0;
    for (int r = 0; r < world; ++r) s += v(r, i, which);
    return s;
  };
  const std::size_t sizes[] = {1, 0, 7, 3001, 40000};
  std::vector<std::vector<i32>> in(5), out(5);
  for (int j = 0; j < 5; ++j) {
    in[j].resize(sizes[j]);
    out[j].assign(sizes[j] + guard, -1);
    for (std::size_t i = 0; i < sizes[j]; ++i) in[j][i] = v(rank, i, j);
  }
  const std::size_t n = 333;
  std::vector<i32> rs_in(n * w), rs_out(n + guard, -1), ag_out(n * w + guard, -1), ag2(n * w + guard, -1);
  std::vector<i32> bc(n + guard, -1), red(n + guard, -1), shift_in(n), shift_out(n + guard, -1);
  for (std::size_t i = 0; i < n * w; ++i) rs_in[i] = v(rank, i, 5);
  for (std::size_t i = 0; i < n; ++i) ag2[rank * n + i] = v(rank, i, 6), shift_in[i] = v(rank, i, 9);
  const int root = k % world, next = (rank + 1) % world, prev = (rank + world - 1) % world;
  std::vector<i32> bc_in(n);
  for (std::size_t i = 0; i < n; ++i) bc_in[i] = v(root, i, 7);

  const std::uint64_t before = c.launches();
  c.group_start();
  c.send<ark::dma::thread_copy<2>>(shift_in.data(), n, next); // listed first, issued last
  for (int j = 0; j < 5; ++j)
    if (j == 2)
      c.all_reduce(in[j].data(), in[j].data(), sizes[j]); // in place
    else
      c.all_reduce(in[j].data(), out[j].data(), sizes[j]);
  c.reduce_scatter(rs_in.data(), rs_out.data(), n);
  c.all_gather(in[0].data(), ag_out.data(), 1);
  c.all_gather(ag2.data() + rank * n, ag2.data(), n); // in place
  c.broadcast(bc_in.data(), bc.data(), n, root);
  c.reduce(shift_in.data(), red.data(), n, root);
  c.recv<ark::dma::thread_copy<2>>(shift_out.data(), n, prev);
  c.group_end();
  c.synchronize();
  launches = c.launches() - before;

  std::size_t bad = 0;
  for (int j = 0; j < 5; ++j) {
    const std::vector<i32>& got = j == 2 ? in[j] : out[j];
    for (std::size_t i = 0; i < sizes[j]; ++i) bad += got[i] != sum(i, j);
    if (j != 2)
      for (std::size_t i = sizes[j]; i < out[j].size(); ++i) bad += out[j][i] != -1;
  }
  for (std::size_t i = 0; i < n; ++i) bad += rs_out[i] != sum(rank * n + i, 5);
  for (int r = 0; r < world; ++r) bad += ag_out[r] != v(r, 0, 0);
  for (std::size_t i = w; i < ag_out.size(); ++i) bad += ag_out[i] != -1;
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < n; ++i) bad += ag2[r * n + i] != v(r, i, 6);
  for (std::size_t i = 0; i < n; ++i) {
    bad += bc[i] != v(root, i, 7);
    bad += shift_out[i] != v(prev, i, 9);
    if (rank == root) bad += red[i] != sum(i, 9);
  }
  for (std::size_t i = n; i < n + guard; ++i)
    bad += rs_out[i] != -1 || bc[i] != -1 || shift_out[i] != -1 || red[i] != -1;
  if (rank != root)
    for (i32 x : red) bad += x != -1;
  return bad;
}

/// A custom collective (one worker) that adds 1 to every element of `buf`, then waits for every rank.
struct add_one {
  std::int32_t* buf;
  std::size_t n;
  template <class Ctx>
  bool operator()(const Ctx& ctx) const {
    if (ctx.g.thread_rank() == 0)
      for (std::size_t i = 0; i < n; ++i) ++buf[i];
    ctx.g.sync();
    return ctx.barrier();
  }
};

} // namespace

TEST_CASE("groups: a group's collectives run in batches, one launch a batch, before its sends and "
          "receives; results exact, worlds 1-5") {
  // all-reduces, reduce-scatter, all-gathers, broadcast, reduce, the sends and receives
  check_rounds({1, 2, 3, 5}, 3, 6, mixed_group_wrong);
}

TEST_CASE("groups: batches break at another dtype, op, backend or options, and hold at most "
          "batch_max_calls; a launch() inside runs in call order") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  std::vector<std::vector<std::uint64_t>> launches(3);
  w.run([&](comm_t& c, int rank) {
    const unsigned most = ark::detail::batch_max_calls;
    std::vector<std::vector<std::int32_t>> a(most + 3, std::vector<std::int32_t>(50, rank + 1));
    std::vector<float> f(20, 1.5f);
    auto mark = [&, before = c.launches()]() mutable {
      launches[rank].push_back(c.launches() - before);
      before = c.launches();
    };
    c.group_start();
    for (auto& x : a) c.all_reduce(x.data(), x.data(), x.size()); // most + 3: two batches
    c.group_end();
    mark();
    c.group_start();
    c.all_reduce(a[0].data(), a[0].data(), 50);
    c.all_reduce(f.data(), f.data(), f.size());                                          // another dtype
    c.all_reduce(a[1].data(), a[1].data(), 50, ark::op::max{});                          // another op
    c.all_reduce<ark::algo::ring, ark::dma::ll_packet<2>>(a[2].data(), a[2].data(), 50); // named
    c.all_reduce<ark::algo::ring, ark::dma::ll_packet<2>>(a[3].data(), a[3].data(), 50);
    ark::call_options<host> two;
    two.workers = 2;
    c.all_reduce(a[4].data(), a[4].data(), 50, ark::op::sum{}, two); // other options
    c.launch(add_one{a[4].data(), 50});                              // after the all-reduce before it
    c.all_reduce(a[4].data(), a[4].data(), 50);
    c.group_end();
    c.synchronize();
    mark();
    // sums over 3 ranks of (rank + 1) = 6; a[0..1] reduced twice (first group, then again)
    for (std::size_t j = 5; j < a.size(); ++j)
      for (auto x : a[j]) bad[rank] += x != 6;
    for (auto x : a[0]) bad[rank] += x != 18;
    for (auto x : a[1]) bad[rank] += x != 6;
    for (int j : {2, 3})
      for (auto x : a[j]) bad[rank] += x != 18;
    for (auto x : a[4]) bad[rank] += x != 57; // (6 * 3 + 1) * 3: the launch ran between the two
    for (float x : f) bad[rank] += x != 4.5f;
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(bad[r] == 0);
    // 2 batches; then: sum, float, max, the named pair, the other options, launch, the last one
    CHECK(launches[r] == std::vector<std::uint64_t>{2, 7});
  }
}

TEST_CASE("groups: a refused collective stays out of the group, which still runs; outside a "
          "group each collective is one launch") {
  test_world w(2);
  std::vector<std::size_t> bad(2, 0);
  std::vector<std::string> msgs(2);
  std::vector<std::uint64_t> launches(2);
  w.run([&](comm_t& c, int rank) {
    std::vector<std::int32_t> a(100, rank + 1), b(100, -1);
    const std::int32_t* none = nullptr;
    c.group_start();
    c.all_reduce(a.data(), b.data(), 100);
    msgs[rank] = message_of<ark::invalid_argument>([&] { c.all_reduce(none, b.data(), 100); });
    c.all_reduce(a.data(), a.data(), 100);
    c.group_end();
    c.synchronize();
    for (std::size_t i = 0; i < 100; ++i) bad[rank] += a[i] != 3 || b[i] != 3;
    const auto before = c.launches();
    c.all_reduce(a.data(), b.data(), 100);
    c.all_reduce(a.data(), b.data(), 100);
    c.synchronize();
    launches[rank] = c.launches() - before;
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(bad[r] == 0);
    CHECK(contains(msgs[r], "send buffer is null"));
    CHECK(launches[r] == 2);
  }
}
