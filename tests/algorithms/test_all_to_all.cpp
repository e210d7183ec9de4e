// All-to-all (algorithms/direct.hpp; communicator::all_to_all, device_comm::all_to_all): block p of
// every rank's input lands as block (sender) of rank p's output. Every backend and depth at worlds
// 1-5 and 8 (support/collective_check.hpp: outputs poisoned, guards, two runs), every dtype, calls
// back to back with other collectives, from the user's own kernel, bad input refused before
// anything runs, a count that differs between ranks a mismatch error.
#include "../support/collective_check.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace ark_test;

namespace {

/// What rank `from` sends rank `to` at element i of its block: exact in every dtype tested.
template <class T>
T value(int from, int to, std::size_t i) {
  return T(static_cast<float>((from * 7 + to * 3 + static_cast<int>(i % 89)) % 97));
}

template <class T>
bool same(T a, T b) {
  return static_cast<double>(static_cast<float>(a)) == static_cast<double>(static_cast<float>(b));
}

constexpr std::size_t guard = 8; // poisoned elements past the output, which no call may touch

/// Runs all_to_all<B> of `count` elements per block on rank `rank` of `c`; returns the wrong
/// elements (output, guard, input).
template <class T, class B = ark::dma::automatic>
std::size_t all_to_all_wrong(comm_t& c, int rank, std::size_t count) {
  const int world = c.world();
  const T poison = T(-1.0f);
  std::vector<T> in(count * world), out(count * world + guard, poison);
  for (int p = 0; p < world; ++p)
    for (std::size_t i = 0; i < count; ++i) in[p * count + i] = value<T>(rank, p, i);
  const std::vector<T> sent = in;
  c.all_to_all<B>(in.data(), out.data(), count);
  c.synchronize();
  std::size_t bad = 0;
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < count; ++i) bad += !same(out[q * count + i], value<T>(q, rank, i));
  for (std::size_t i = count * world; i < out.size(); ++i) bad += !same(out[i], poison);
  for (std::size_t i = 0; i < in.size(); ++i) bad += !same(in[i], sent[i]);
  return bad;
}

/// A device-side all_to_all from the user's own (host-platform) kernel, as a GPU kernel would call it.
template <class B>
struct all_to_all_kernel {
  ark::device_comm<host> comm;
  const std::int32_t* in;
  std::int32_t* out;
  std::size_t count;
  template <class Ctx>
  bool operator()(const Ctx& ctx) const {
    return comm.template all_to_all<B>(ctx.g, ctx.worker, ctx.workers, in, out, count);
  }
};

} // namespace

TEST_CASE("all_to_all: every backend and depth, worlds 1-5 and 8, sizes around a slot, twice") {
  const std::vector<int> worlds{1, 2, 3, 4, 5, 8};
  run_matrix<ark::collective::all_to_all, std::int32_t>(
      type_list<ark::algo::direct>{},
      type_list<ark::dma::automatic, ark::dma::thread_copy<1>, ark::dma::thread_copy<8>,
                ark::dma::ll_packet<1>, ark::dma::ll_packet<8>, ark::dma::proxy_engine<2>>{},
      type_list<ark::op::sum>{}, small_config(), worlds);
}

TEST_CASE("all_to_all: every dtype, and calls back to back with the other collectives") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  w.run([&](comm_t& c, int rank) {
    for (std::size_t n : {1, 300, 777}) {
      bad[rank] += all_to_all_wrong<float>(c, rank, n);
      bad[rank] += all_to_all_wrong<double, ark::dma::thread_copy<2>>(c, rank, n);
      bad[rank] += all_to_all_wrong<ark::fp16>(c, rank, n);
      bad[rank] += all_to_all_wrong<ark::bf16, ark::dma::ll_packet<2>>(c, rank, n);
      bad[rank] += all_to_all_wrong<std::uint8_t>(c, rank, n);
      bad[rank] += all_to_all_wrong<std::int64_t, ark::dma::proxy_engine<4>>(c, rank, n);
    }
    // interleaved with all-reduces and all-gathers of other sizes: the steps of one call follow
    // the other's on every worker
    std::mt19937 rng(7); // the same sizes on every rank
    for (int k = 0; k < 40; ++k) {
      const std::size_t n = rng() % 2000;
      bad[rank] += all_to_all_wrong<std::int32_t>(c, rank, n);
      std::vector<std::int32_t> a(n + 1, rank + 1), r(n + 1, -1);
      c.all_reduce(a.data(), r.data(), n + 1);
      for (auto v : r) bad[rank] += v != 6;
    }
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("all_to_all: device-side, from the user's own kernel, several workers") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      for (std::size_t n : {0, 5, 700}) {
        std::vector<std::int32_t> in(n * world), out(n * world, -1);
        for (int p = 0; p < world; ++p)
          for (std::size_t i = 0; i < n; ++i) in[p * n + i] = value<std::int32_t>(rank, p, i);
        c.launch<ark::dma::thread_copy<2>>(
            all_to_all_kernel<ark::dma::thread_copy<2>>{c.device_handle(), in.data(), out.data(), n}, 3);
        c.synchronize();
        for (int q = 0; q < world; ++q)
          for (std::size_t i = 0; i < n; ++i) bad[rank] += out[q * n + i] != value<std::int32_t>(q, rank, i);
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("all_to_all: bad arguments are refused before anything runs, the output untouched") {
  test_world w(2);
  std::vector<std::vector<std::string>> msgs(2);
  std::vector<std::size_t> touched(2, 0);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(16, 1.0f), out(16, -2.0f);
    auto& m = msgs[rank];
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_to_all(static_cast<const float*>(nullptr), out.data(), 4); }));
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.all_to_all(in.data(), static_cast<float*>(nullptr), 4); }));
    const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.data()) + 2);
    m.push_back(message_of<ark::invalid_argument>([&] { c.all_to_all(odd, out.data(), 4); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.all_to_all(out.data(), out.data(), 4); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.all_to_all(out.data() + 2, out.data(), 4); }));
    ark::call_options<host> engine_only;
    engine_only.max_ctas = 0;
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.all_to_all(in.data(), out.data(), 4, engine_only); }));
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_to_all<ark::dma::thread_copy<9>>(in.data(), out.data(), 4); }));
    for (float v : out) touched[rank] += v != -2.0f;
    // a valid call after the refusals runs
    for (std::size_t i = 0; i < 8; ++i) in[i] = static_cast<float>(10 * rank + i);
    c.all_to_all(in.data(), out.data(), 4);
    for (int q = 0; q < 2; ++q)
      for (int i = 0; i < 4; ++i)
        touched[rank] += out[q * 4 + i] != static_cast<float>(10 * q + rank * 4 + i);
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(touched[r] == 0);
    const auto& m = msgs[r];
    REQUIRE(m.size() == 7);
    CHECK(contains(m[0], "all_to_all: send buffer is null"));
    CHECK(contains(m[1], "all_to_all: recv buffer is null"));
    CHECK(contains(m[2], "not aligned"));
    CHECK(contains(m[3], "overlap"));
    CHECK(contains(m[4], "overlap"));
    CHECK(contains(m[5], "register the recv buffer")); // the copy engine alone writes into it
    CHECK(contains(m[6], "exceeds team_config.max_depth"));
  }
}

TEST_CASE("all_to_all: a count that differs between ranks is a mismatch error, nothing stored") {
  auto cfg = small_config();
  cfg.timeout = std::chrono::milliseconds(5000);
  test_world w(3, cfg);
  std::vector<std::size_t> touched(3, 0);
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    const std::size_t n = rank == 1 ? 40 : 41;
    std::vector<std::int32_t> in(3 * n, rank), out(3 * n, -5);
    try {
      c.all_to_all(in.data(), out.data(), n);
      c.synchronize();
    } catch (...) {
      for (auto v : out) touched[rank] += v != -5;
      throw;
    }
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    REQUIRE(errs[r]);
    try {
      std::rethrow_exception(errs[r]);
    } catch (const ark::mismatch_error& e) {
      CHECK(contains(e.what(), "count"));
    } catch (const std::exception& e) {
      FAIL_CHECK("expected a mismatch_error, got: " << std::string(e.what()));
    }
    CHECK(touched[r] == 0);
  }
}
