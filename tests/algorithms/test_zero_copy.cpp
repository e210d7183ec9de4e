// Zero-copy all-reduce, reduce-scatter and all-gather (algorithms/zero_copy.hpp): buffers
// registered at the same place on every rank are read in place. The matrix of every depth, op and
// world, in place and not (support/collective_check.hpp: outputs poisoned, guards, two runs,
// ranks bitwise alike); every dtype; the automatic choice taking it for registered buffers and
// the plan saying so; calls interleaved with staged ones on the same workers; from the user's own
// kernel over symmetric views; a named zero_copy on buffers not registered refused before
// anything runs; buffers at different places a mismatch error on every rank, nothing stored.
#include "../support/collective_check.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace ark_test;

namespace {

// thread copies, and the copy engine through the CPU proxy (the engine moves what needs no
// reduction; dma::tma, the other engine backend, runs on sm_90 GPUs alone: tests/gpu)
using zero_copy_depths =
    type_list<ark::dma::thread_copy<1>, ark::dma::thread_copy<2>, ark::dma::thread_copy<4>,
              ark::dma::thread_copy<8>, ark::dma::proxy_engine<1>, ark::dma::proxy_engine<4>>;
const std::vector<int> worlds{1, 2, 3, 4, 5, 8};

/// Every depth with sum, and every op over the automatic backend (thread copies of the default
/// depth): what the op changes does not depend on the depth.
template <ark::collective K, class T, class Ops>
void zero_copy_matrix(Ops ops) {
  run_matrix<K, T>(type_list<ark::algo::zero_copy>{}, zero_copy_depths{}, type_list<ark::op::sum>{},
                   small_config(), worlds, matrix_sizes(), true);
  run_matrix<K, T>(type_list<ark::algo::zero_copy>{}, type_list<ark::dma::automatic>{}, ops, small_config(),
                   worlds, matrix_sizes(), true);
}

/// A zero-copy all-reduce, reduce-scatter or all-gather (in place) from the user's own
/// (host-platform) kernel, over symmetric views, as a GPU kernel would call them. One a launch:
/// a worker's call syncs with the same worker of its peers only, and the next collective's
/// shares are not the last one's (device_comm.hpp: join the blocks first).
template <class B>
struct zero_copy_kernel {
  ark::device_comm<host> comm;
  int which;
  ark::symmetric<const float> in;
  ark::symmetric<float> sum, blocks;
  float* mine;
  std::size_t count;
  template <class Ctx>
  bool operator()(const Ctx& ctx) const {
    const std::size_t block = count / static_cast<std::size_t>(comm.world());
    if (which == 0) return comm.template all_reduce<B>(ctx.g, ctx.worker, ctx.workers, in, sum, count);
    if (which == 1)
      return comm.template reduce_scatter<B>(ctx.g, ctx.worker, ctx.workers, ark::symmetric<const float>(sum),
                                             mine, block, ark::op::max{});
    return comm.template all_gather<B>(ctx.g, ctx.worker, ctx.workers, ark::symmetric<const float>(blocks),
                                       blocks.local, block);
  }
};

} // namespace

TEST_CASE("zero-copy all_reduce: every depth and op, worlds 1-5 and 8, in place and not, twice") {
  zero_copy_matrix<ark::collective::all_reduce, float>(all_ops{});
  zero_copy_matrix<ark::collective::all_reduce, std::int32_t>(all_ops{});
}

TEST_CASE("zero-copy reduce_scatter: every depth and op, worlds 1-5 and 8, in place and not, twice") {
  zero_copy_matrix<ark::collective::reduce_scatter, float>(all_ops{});
}

TEST_CASE("zero-copy all_gather: every depth, worlds 1-5 and 8, in place and not, twice") {
  zero_copy_matrix<ark::collective::all_gather, std::uint8_t>(type_list<ark::op::sum>{});
  zero_copy_matrix<ark::collective::all_gather, double>(type_list<ark::op::sum>{});
}

TEST_CASE("zero-copy: every dtype, all_reduce sum and all_gather, worlds 2 and 3") {
  for (int world : {2, 3}) {
    test_world w(world);
    std::uint64_t seed = 7;
    auto each = [&](auto t) {
      using T = decltype(t);
      for (std::size_t n : {5, 1001})
        for (bool in_place : {false, true}) {
          const case_params p{n, 0, in_place, seed++, true};
          check_collective<ark::collective::all_reduce, T, ark::op::sum>(
              w, p,
              make_callee<ark::collective::all_reduce, ark::algo::zero_copy, ark::dma::automatic, T,
                          ark::op::sum>());
          check_collective<ark::collective::all_gather, T, ark::op::sum>(
              w, p,
              make_callee<ark::collective::all_gather, ark::algo::zero_copy, ark::dma::automatic, T,
                          ark::op::sum>());
        }
    };
    for_each_type(type_list<std::uint8_t, std::int32_t, std::int64_t, ark::fp16, ark::bf16, float, double>{},
                  each);
  }
}

TEST_CASE("zero-copy: the automatic choice takes it for registered buffers from zero_copy_min_bytes, the "
          "plan says so") {
  test_world w(3);
  std::vector<std::size_t> bad(3, 0);
  w.run([&](comm_t& c, int rank) {
    const std::size_t big = c.configuration().tuning.zero_copy_min_bytes / sizeof(float) + 3, small = 1000;
    std::vector<float> reg(3 * big + 64), plain(3 * big + 64);
    c.register_buffer(reg.data(), reg.size() * sizeof(float));
    using K = std::integral_constant<ark::collective, ark::collective::all_reduce>;
    const auto zc = ark::algo::zero_copy::id;
    // registered and large: zero-copy, its scratch the headers and flags alone
    const auto p_reg = c.plan<K::value>(reg.data(), reg.data() + big, big);
    const auto p_plain = c.plan<K::value>(plain.data(), plain.data() + big, big);
    bad[rank] += p_reg.algorithm != zc;
    bad[rank] += p_plain.algorithm == zc;
    bad[rank] += p_reg.scratch_bytes >= p_plain.scratch_bytes;
    // small, or LL packets named: staged; thread copies or an engine named: zero-copy
    bad[rank] += c.plan<K::value>(reg.data(), reg.data() + big, small).algorithm == zc;
    bad[rank] +=
        c.plan<K::value, ark::algo::automatic, ark::dma::ll_packet<2>>(reg.data(), reg.data() + big, big)
            .algorithm == zc;
    bad[rank] +=
        c.plan<K::value, ark::algo::automatic, ark::dma::thread_copy<2>>(reg.data(), reg.data() + big, big)
            .algorithm != zc;
    const auto p_engine =
        c.plan<K::value, ark::algo::automatic, ark::dma::proxy_engine<2>>(reg.data(), reg.data() + big, big);
    bad[rank] += p_engine.algorithm != zc || p_engine.backend != ark::dma::proxy_engine<2>::id;
    bad[rank] +=
        c.plan<ark::collective::reduce_scatter>(reg.data(), reg.data() + 3 * big, big).algorithm != zc;
    bad[rank] += c.plan<ark::collective::all_gather>(reg.data(), reg.data() + big, big).algorithm != zc;
    // in place all-gather: the output registered is what counts
    bad[rank] +=
        c.plan<ark::collective::all_gather>(reg.data() + rank * big, reg.data(), big).algorithm != zc;
    // and it runs right: the sum of every rank's input
    for (std::size_t i = 0; i < big; ++i) reg[i] = static_cast<float>((rank + 1) * (i % 13));
    c.all_reduce(reg.data(), reg.data() + big, big);
    c.synchronize();
    for (std::size_t i = 0; i < big; ++i) bad[rank] += reg[big + i] != static_cast<float>(6 * (i % 13));
    c.deregister_buffer(reg.data());
  });
  for (int r = 0; r < 3; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("zero-copy calls between staged ones on the same workers: 20 rounds, every result checked") {
  test_world w(4);
  std::vector<std::size_t> bad(4, 0);
  w.run([&](comm_t& c, int rank) {
    const std::size_t n = 4099;
    std::vector<std::int32_t> reg(8 * n), plain(8 * n);
    c.register_buffer(reg.data(), reg.size() * sizeof(std::int32_t));
    for (int round = 0; round < 20; ++round) {
      const std::int32_t base = round * 100 + rank;
      for (std::size_t i = 0; i < 4 * n; ++i) reg[i] = plain[i] = base + static_cast<std::int32_t>(i % 5);
      std::int32_t* zc_out = reg.data() + 4 * n;
      std::int32_t* out = plain.data() + 4 * n;
      // zero-copy, staged thread copies, LL packets, zero-copy again: the channels' steps follow
      c.all_reduce<ark::algo::zero_copy>(reg.data(), zc_out, n);
      c.all_reduce<ark::algo::two_shot, ark::dma::thread_copy<2>>(plain.data(), out, n);
      c.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<4>>(plain.data(), out + n, 7);
      c.reduce_scatter<ark::algo::zero_copy, ark::dma::thread_copy<1>>(reg.data(), zc_out + n, n / 4);
      c.all_gather<ark::algo::zero_copy>(reg.data(), zc_out + 2 * n, n / 4);
      c.synchronize();
      const std::int32_t sum0 = 4 * round * 100 + 6;
      for (std::size_t i = 0; i < n; ++i) {
        const auto want = sum0 + 4 * static_cast<std::int32_t>(i % 5);
        bad[rank] += zc_out[i] != want;
        bad[rank] += out[i] != want;
      }
      for (std::size_t i = 0; i < 7; ++i)
        bad[rank] += out[n + i] != sum0 + 4 * static_cast<std::int32_t>(i % 5);
      for (std::size_t i = 0; i < n / 4; ++i)
        bad[rank] += zc_out[n + i] != sum0 + 4 * static_cast<std::int32_t>((rank * (n / 4) + i) % 5);
      for (int q = 0; q < 4; ++q)
        for (std::size_t i = 0; i < n / 4; ++i)
          bad[rank] += zc_out[2 * n + q * (n / 4) + i] != round * 100 + q + static_cast<std::int32_t>(i % 5);
    }
    c.deregister_buffer(reg.data());
  });
  for (int r = 0; r < 4; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("zero-copy: device-side, from the user's own kernel over symmetric views, several workers, "
          "thread copies and the copy engine") {
  auto each = [](int world, auto backend) {
    using B = decltype(backend);
    test_world w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      const std::size_t n = 3 * 1000 * static_cast<std::size_t>(world), block = n / world;
      std::vector<float> reg(3 * n), mine(block, -1.0f);
      c.register_buffer(reg.data(), reg.size() * sizeof(float));
      float* in = reg.data();
      float* sum = reg.data() + n;
      float* blocks = reg.data() + 2 * n;
      for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((rank + 1) * (i % 9));
      for (std::size_t i = 0; i < block; ++i) blocks[rank * block + i] = static_cast<float>(rank * 1000 + i);
      const float total = static_cast<float>(world * (world + 1) / 2);
      for (int which = 0; which < 3; ++which)
        c.launch<B>(zero_copy_kernel<B>{c.device_handle(), which, c.symmetric<const float>(in, n),
                                        c.symmetric(sum, n), c.symmetric(blocks, n), mine.data(), n},
                    3);
      c.synchronize();
      for (std::size_t i = 0; i < n; ++i) bad[rank] += sum[i] != total * static_cast<float>(i % 9);
      for (std::size_t i = 0; i < block; ++i)
        bad[rank] += mine[i] != total * static_cast<float>((rank * block + i) % 9);
      for (int q = 0; q < world; ++q)
        for (std::size_t i = 0; i < block; ++i)
          bad[rank] += blocks[q * block + i] != static_cast<float>(q * 1000 + i);
      c.deregister_buffer(reg.data());
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  };
  for (int world : {2, 3}) {
    CAPTURE(world);
    each(world, ark::dma::thread_copy<2>{});
    each(world, ark::dma::proxy_engine<2>{});
  }
}

TEST_CASE("zero-copy: buffers not registered are refused before anything runs, the outputs untouched") {
  test_world w(2);
  std::vector<std::vector<std::string>> msgs(2);
  std::vector<std::size_t> touched(2, 0);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> reg(64, 1.0f), in(64, 1.0f), out(64, -2.0f);
    c.register_buffer(reg.data(), reg.size() * sizeof(float));
    auto& m = msgs[rank];
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::zero_copy>(in.data(), out.data(), 8); }));
    // the output must be registered too: the peers read the chunks this rank reduced from it
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::zero_copy>(reg.data(), out.data(), 8); }));
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.reduce_scatter<ark::algo::zero_copy>(in.data(), out.data(), 4); }));
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_gather<ark::algo::zero_copy>(in.data(), out.data(), 4); }));
    // in place, an all-gather reads the output's blocks: the output must be registered
    m.push_back(message_of<ark::invalid_argument>(
        [&] { c.all_gather<ark::algo::zero_copy>(out.data() + 4 * rank, out.data(), 4); }));
    m.push_back(message_of<ark::invalid_argument>([&] { (void)c.symmetric(in.data(), 8); }));
    for (float v : out) touched[rank] += v != -2.0f;
    c.deregister_buffer(reg.data());
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(touched[r] == 0);
    const auto& m = msgs[r];
    REQUIRE(m.size() == 6);
    CHECK(contains(
        m[0], "all_reduce: algo::zero_copy reads the peers' buffers in place: register the send and recv"));
    CHECK(contains(m[1], "register the send and recv buffers"));
    CHECK(contains(m[2], "reduce_scatter: algo::zero_copy"));
    CHECK(contains(m[3], "register the send buffer"));
    CHECK(contains(m[4], "register the recv buffer"));
    CHECK(contains(m[5], "not inside a buffer registered"));
  }
}

TEST_CASE("zero-copy over device graphs: named, refused before anything runs; automatic, staged and right") {
  auto cfg = small_config();
  cfg.engine = ark::engine_path::device_graphs;
  test_world w(2, cfg);
  std::vector<std::string> msgs(2);
  std::vector<std::size_t> bad(2, 0);
  w.run([&](comm_t& c, int rank) {
    using B = ark::dma::proxy_engine<2>;
    const std::size_t n = c.configuration().tuning.zero_copy_min_bytes / sizeof(float) + 5;
    std::vector<float> reg(2 * n);
    c.register_buffer(reg.data(), reg.size() * sizeof(float));
    std::fill(reg.begin(), reg.begin() + n, static_cast<float>(rank + 1));
    std::fill(reg.begin() + n, reg.end(), -2.0f);
    msgs[rank] = message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::zero_copy, B>(reg.data(), reg.data() + n, n); });
    for (std::size_t i = n; i < 2 * n; ++i) bad[rank] += reg[i] != -2.0f;
    // the automatic choice over the same engine takes the staged path, which device graphs serve
    bad[rank] += c.plan<ark::collective::all_reduce, ark::algo::automatic, B>(reg.data(), reg.data() + n, n)
                     .algorithm == ark::algo::zero_copy::id;
    c.all_reduce<ark::algo::automatic, B>(reg.data(), reg.data() + n, n);
    c.synchronize();
    for (std::size_t i = n; i < 2 * n; ++i) bad[rank] += reg[i] != 3.0f;
    c.deregister_buffer(reg.data());
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(bad[r] == 0);
    CHECK(contains(msgs[r], "all_reduce: algo::zero_copy over dma::proxy_engine needs engine_path::proxy"));
  }
}

TEST_CASE("zero-copy over proxy_engine without staging: refused (its engine runs only with staging), the "
          "output untouched") {
  auto cfg = small_config();
  cfg.team.staging = false;
  test_world w(2, cfg);
  std::vector<std::string> msgs(2);
  std::vector<std::size_t> touched(2, 0);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> reg(2048, 1.0f);
    c.register_buffer(reg.data(), reg.size() * sizeof(float));
    std::fill(reg.begin() + 1024, reg.end(), -2.0f);
    msgs[rank] = message_of<ark::invalid_argument>([&] {
      c.all_gather<ark::algo::zero_copy, ark::dma::proxy_engine<2>>(reg.data(), reg.data() + 1024, 512);
    });
    for (std::size_t i = 1024; i < reg.size(); ++i) touched[rank] += reg[i] != -2.0f;
    c.deregister_buffer(reg.data());
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(touched[r] == 0);
    CHECK(contains(msgs[r], "all_gather: this DMA backend needs staging (team_config.staging = true)"));
  }
}

TEST_CASE("zero-copy: buffers at different places of the window are a mismatch error on every rank, "
          "nothing stored") {
  auto cfg = small_config();
  cfg.timeout = std::chrono::milliseconds(5000);
  for (int which : {0, 1, 2}) { // all_reduce's input, its output, all_gather's input
    CAPTURE(which);
    test_world w(3, cfg);
    std::vector<std::size_t> touched(3, 0);
    const auto errs = w.try_run([&](comm_t& c, int rank) {
      const std::size_t n = 1000;
      std::vector<float> reg(4 * n, 1.0f);
      c.register_buffer(reg.data(), reg.size() * sizeof(float));
      const std::size_t shift = rank == 2 ? 16 : 0;
      float* in = reg.data() + (which == 0 ? shift : 0);
      float* out = reg.data() + 2 * n + (which == 1 ? shift : 0);
      std::fill(reg.begin() + 2 * n, reg.end(), -5.0f);
      try {
        try {
          if (which == 2)
            c.all_gather<ark::algo::zero_copy>(reg.data() + shift, out, n / 4);
          else
            c.all_reduce<ark::algo::zero_copy>(in, out, n);
          c.synchronize();
        } catch (...) {
          for (std::size_t i = 2 * n; i < reg.size(); ++i) touched[rank] += reg[i] != -5.0f;
          throw;
        }
      } catch (...) {
        c.deregister_buffer(reg.data());
        throw;
      }
      c.deregister_buffer(reg.data());
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      REQUIRE(errs[r]);
      try {
        std::rethrow_exception(errs[r]);
      } catch (const ark::mismatch_error& e) {
        CHECK(contains(e.what(), "place of the buffer in its registered window"));
        CHECK(contains(e.what(), "offset"));
      } catch (const std::exception& e) {
        FAIL_CHECK("expected a mismatch_error, got: " << std::string(e.what()));
      }
      CHECK(touched[r] == 0);
    }
  }
}
