// Point-to-point (algorithms/p2p.hpp; communicator::send, recv, group_start/group_end,
// all_to_allv; device_comm::p2p, send, recv): only the ranks a send names take part; a group of
// any mix completes in whatever order each rank lists it. Ring shifts, pairs that send to and
// receive from each other while other ranks stay out, all pairs with uneven counts (zeros
// included), over every backend and depth at worlds 1-5; every dtype; calls back to back with
// collectives; from the user's own kernel; bad input refused before anything runs; a send
// without its receive a timeout, counts that differ a mismatch for the receiver, nothing stored.
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
