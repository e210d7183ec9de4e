// Gather and scatter (algorithms/direct.hpp; communicator::gather and ::scatter, device_comm's):
// every rank's input lands as a block of the root's output; the root's input blocks land in every
// rank's output. Every backend and depth at worlds 1-5 and 8, every root, in place at the root and
// not (support/collective_check.hpp: outputs poisoned, guards, two runs; a gather leaves the other
// ranks' outputs untouched), every dtype, calls back to back with other collectives, from the
// user's own kernel, bad input refused before anything runs, a root that differs between ranks a
// mismatch error.
#include "../support/collective_check.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace ark_test;

namespace {

/// Element i of block `block` of rank `from`'s input: exact in every dtype tested.
template <class T>
T value(int from, int block, std::size_t i) {
  return T(static_cast<float>((from * 5 + block * 11 + static_cast<int>(i % 83)) % 97));
}

template <class T>
bool same(T a, T b) {
  return static_cast<double>(static_cast<float>(a)) == static_cast<double>(static_cast<float>(b));
}

/// Runs gather<B> then scatter<B> of `count` elements per block to and from `root` on rank
/// `rank` of `c`; returns the wrong elements (outputs, what no call may touch, inputs).
template <class T, class B = ark::dma::automatic>
std::size_t gather_scatter_wrong(comm_t& c, int rank, std::size_t count, int root) {
  const int world = c.world();
  const T poison = T(-1.0f);
  std::vector<T> mine(count), gathered(count * world + 8, poison);
  for (std::size_t i = 0; i < count; ++i) mine[i] = value<T>(rank, 0, i);
  c.gather<B>(mine.data(), gathered.data(), count, root);
  std::vector<T> blocks(count * world), got(count + 8, poison);
  for (int p = 0; p < world; ++p)
    for (std::size_t i = 0; i < count; ++i) blocks[p * count + i] = value<T>(rank, p + 1, i);
  c.scatter<B>(blocks.data(), got.data(), count, root);
  c.synchronize();
  std::size_t bad = 0;
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < count; ++i)
      bad += !same(gathered[q * count + i], rank == root ? value<T>(q, 0, i) : poison);
  for (std::size_t i = count * world; i < gathered.size(); ++i) bad += !same(gathered[i], poison);
  for (std::size_t i = 0; i < count; ++i) bad += !same(got[i], value<T>(root, rank + 1, i));
  for (std::size_t i = count; i < got.size(); ++i) bad += !same(got[i], poison);
  for (std::size_t i = 0; i < count; ++i) bad += !same(mine[i], value<T>(rank, 0, i));
  return bad;
}

/// A device-side gather and scatter from the user's own (host-platform) kernel, as a GPU kernel
/// would call them.
template <class B>
struct gather_scatter_kernel {
  ark::device_comm<host> comm;
  const std::int32_t* in;
  std::int32_t* gathered;
  const std::int32_t* blocks;
  std::int32_t* got;
  std::size_t count;
  int root;
  template <class Ctx>
  bool operator()(const Ctx& ctx) const {
    return comm.template gather<B>(ctx.g, ctx.worker, ctx.workers, in, gathered, count, root) &&
           comm.template scatter<B>(ctx.g, ctx.worker, ctx.workers, blocks, got, count, root);
  }
};

using backends = type_list<ark::dma::automatic, ark::dma::thread_copy<1>, ark::dma::thread_copy<8>,
                           ark::dma::ll_packet<1>, ark::dma::ll_packet<8>, ark::dma::proxy_engine<2>>;

} // namespace

TEST_CASE("gather: every backend and depth, worlds 1-5 and 8, every root, in place and not, twice") {
  run_matrix<ark::collective::gather, std::int32_t>(type_list<ark::algo::direct>{}, backends{},
                                                    type_list<ark::op::sum>{}, small_config(),
                                                    {1, 2, 3, 4, 5, 8});
}

TEST_CASE("scatter: every backend and depth, worlds 1-5 and 8, every root, in place and not, twice") {
  run_matrix<ark::collective::scatter, std::int32_t>(type_list<ark::algo::direct>{}, backends{},
                                                     type_list<ark::op::sum>{}, small_config(),
                                                     {1, 2, 3, 4, 5, 8});
}

TEST_CASE("gather and scatter: every dtype, every root, back to back with the other collectives") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  w.run([&](comm_t& c, int rank) {
    for (int root = 0; root < 3; ++root)
      for (std::size_t n : {1, 300, 777}) {
        bad[rank] += gather_scatter_wrong<float>(c, rank, n, root);
        bad[rank] += gather_scatter_wrong<double, ark::dma::thread_copy<2>>(c, rank, n, root);
        bad[rank] += gather_scatter_wrong<ark::fp16>(c, rank, n, root);
        bad[rank] += gather_scatter_wrong<ark::bf16, ark::dma::ll_packet<2>>(c, rank, n, root);
        bad[rank] += gather_scatter_wrong<std::uint8_t>(c, rank, n, root);
        bad[rank] += gather_scatter_wrong<std::int64_t, ark::dma::proxy_engine<4>>(c, rank, n, root);
        std::vector<std::int32_t> a(n + 3, rank + 1), r(n + 3, -1);
        c.all_reduce(a.data(), r.data(), n + 3);
        for (auto v : r) bad[rank] += v != 6;
      }
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("gather and scatter: device-side, from the user's own kernel, several workers") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      for (std::size_t n : {0, 5, 700}) {
        const int root = static_cast<int>(n % world);
        std::vector<std::int32_t> in(n), gathered(n * world, -1), blocks(n * world), got(n, -1);
        for (std::size_t i = 0; i < n; ++i) in[i] = value<std::int32_t>(rank, 0, i);
        for (int p = 0; p < world; ++p)
          for (std::size_t i = 0; i < n; ++i) blocks[p * n + i] = value<std::int32_t>(rank, p + 1, i);
        using B = ark::dma::thread_copy<2>;
        c.launch<B>(gather_scatter_kernel<B>{c.device_handle(), in.data(), gathered.data(), blocks.data(),
                                             got.data(), n, root},
                    3);
        c.synchronize();
        for (int q = 0; q < world; ++q)
          for (std::size_t i = 0; i < n; ++i)
            bad[rank] += gathered[q * n + i] != (rank == root ? value<std::int32_t>(q, 0, i) : -1);
        for (std::size_t i = 0; i < n; ++i) bad[rank] += got[i] != value<std::int32_t>(root, rank + 1, i);
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("gather and scatter: bad arguments are refused before anything runs, the outputs untouched") {
  test_world w(2);
  std::vector<std::vector<std::string>> msgs(2);
  std::vector<std::size_t> touched(2, 0);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(16, 1.0f), out(16, -2.0f);
    auto& m = msgs[rank];
    const float* none = nullptr;
    float* none_out = nullptr;
    m.push_back(message_of<ark::invalid_argument>([&] { c.gather(none, out.data(), 4, 0); }));
    // the root's output must be there (another rank's is not used: see the valid calls below)
    m.push_back(message_of<ark::invalid_argument>([&] { c.gather(in.data(), none_out, 4, rank); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.gather(in.data(), out.data(), 4, 2); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.gather(out.data() + 1, out.data(), 4, rank); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.scatter(in.data(), none_out, 4, 0); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.scatter(in.data(), out.data(), 4, -1); }));
    m.push_back(message_of<ark::invalid_argument>([&] { c.scatter(out.data(), out.data() + 1, 4, rank); }));
    const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.data()) + 2);
    m.push_back(message_of<ark::invalid_argument>([&] { c.gather(odd, out.data() + 8, 4, 1); }));
    ark::call_options<host> engine_only;
    engine_only.max_ctas = 0;
    m.push_back(
        message_of<ark::invalid_argument>([&] { c.scatter(in.data(), out.data(), 4, 0, engine_only); }));
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.gather<ark::dma::thread_copy<9>>(in.data(), out.data(), 4, 0); }));
    for (float v : out) touched[rank] += v != -2.0f;
    // valid calls after the refusals run; a rank other than the root passes null for what it
    // does not use
    for (std::size_t i = 0; i < 8; ++i) in[i] = static_cast<float>(10 * rank + i);
    c.gather(in.data(), rank == 1 ? out.data() : none_out, 4, 1);
    c.scatter(rank == 0 ? in.data() : none, out.data() + 8, 4, 0);
    c.synchronize();
    if (rank == 1)
      for (int q = 0; q < 2; ++q)
        for (int i = 0; i < 4; ++i) touched[rank] += out[q * 4 + i] != static_cast<float>(10 * q + i);
    for (int i = 0; i < 4; ++i) touched[rank] += out[8 + i] != static_cast<float>(rank * 4 + i);
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(touched[r] == 0);
    const auto& m = msgs[r];
    REQUIRE(m.size() == 10);
    CHECK(contains(m[0], "gather: send buffer is null"));
    CHECK(contains(m[1], "gather: recv buffer is null"));
    CHECK(contains(m[2], "root 2 is outside [0, 2)"));
    CHECK(contains(m[3], "overlap"));
    CHECK(contains(m[4], "scatter: recv buffer is null"));
    CHECK(contains(m[5], "root -1 is outside"));
    CHECK(contains(m[6], "overlap"));
    CHECK(contains(m[7], "not aligned"));
    CHECK(contains(m[8], "register the recv buffer")); // the copy engine alone writes into it
    CHECK(contains(m[9], "exceeds team_config.max_depth"));
  }
}

TEST_CASE("gather and scatter: a root or count that differs between ranks is a mismatch error, nothing "
          "stored") {
  auto cfg = small_config();
  cfg.timeout = std::chrono::milliseconds(5000);
  for (bool scatter : {false, true})
    for (bool root_differs : {false, true}) {
      CAPTURE(scatter);
      CAPTURE(root_differs);
      test_world w(3, cfg);
      std::vector<std::size_t> touched(3, 0);
      const auto errs = w.try_run([&](comm_t& c, int rank) {
        const std::size_t n = !root_differs && rank == 1 ? 40 : 41;
        const int root = root_differs && rank == 2 ? 1 : 0;
        std::vector<std::int32_t> in(3 * n, rank), out(3 * n, -5);
        try {
          if (scatter)
            c.scatter(in.data(), out.data(), n, root);
          else
            c.gather(in.data(), out.data(), n, root);
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
          CHECK(contains(e.what(), root_differs ? "root" : "count"));
        } catch (const std::exception& e) {
          FAIL_CHECK("expected a mismatch_error, got: " << std::string(e.what()));
        }
        CHECK(touched[r] == 0);
      }
    }
}
