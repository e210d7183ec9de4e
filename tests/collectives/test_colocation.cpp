// Co-location controls on the host platform: the call plan reported before a call, the SM budget
// (max_ctas) capping blocks, and the copy-engine-only all_gather / broadcast (max_ctas = 0) into
// registered buffers: random data, poisoned outputs, in place and not, every root, repeated calls
// interleaved with ordinary ones, and the errors for what it cannot do.
#include "../support/collective_check.hpp"

#include <random>

using namespace ark_test;

namespace {
using comm_t = ark::communicator<host>;

std::vector<std::int32_t> pattern(std::size_t n, int rank, int call) {
  std::vector<std::int32_t> v(n);
  std::mt19937 g(static_cast<unsigned>(rank * 7919 + call));
  for (auto& x : v) x = static_cast<std::int32_t>(g());
  return v;
}
} // namespace

TEST_CASE("plan: reported before the call, SM budget caps blocks, copy-engine-only where allowed") {
  basic_world<host> w(2);
  w.run([&](comm_t& c, int) {
    ark::call_options<host> o;
    const auto free_plan = c.plan<ark::collective::all_reduce, ark::algo::ring, ark::dma::thread_copy<2>, float>(
        1 << 20, o);
    CHECK(free_plan.ctas == 3); // 4 MB over 4 KB per worker, capped by team_config.workers
    CHECK(free_plan.algorithm == ark::algo::ring::id);
    CHECK(free_plan.backend == ark::dma::thread_copy<2>::id);
    CHECK_FALSE(free_plan.copy_engine_only);
    CHECK(free_plan.scratch_bytes > 0);
    CHECK(free_plan.scratch_bytes <= c.scratch_bytes());
    o.max_ctas = 2;
    const auto capped = c.plan<ark::collective::all_reduce, ark::algo::ring, ark::dma::thread_copy<2>, float>(
        1 << 20, o);
    CHECK(capped.ctas == 2);
    CHECK(capped.scratch_bytes * 3 == free_plan.scratch_bytes * 2);
    o.max_ctas = 0;
    const auto ce = c.plan<ark::collective::all_gather, ark::algo::direct, ark::dma::automatic, float>(1000, o);
    CHECK(ce.copy_engine_only);
    CHECK(ce.ctas == 1);
    CHECK(ce.backend == 0);
    CHECK_THROWS_AS((c.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float>(10, o)),
                    ark::invalid_argument);
    o.max_ctas = -2;
    CHECK_THROWS_AS((c.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float>(10, o)),
                    ark::invalid_argument);
  });
}

TEST_CASE("max_ctas: an all-reduce under an SM budget is still exact") {
  for (int world : {2, 3}) {
    basic_world<host> w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      for (int budget : {1, 2}) {
        const std::size_t n = 20000 + 3;
        auto in = pattern(n, rank, budget);
        std::vector<std::int32_t> out(n, -7);
        ark::call_options<host> o;
        o.max_ctas = budget;
        c.all_reduce<ark::algo::two_shot, ark::dma::thread_copy<4>>(in.data(), out.data(), n, ark::op::sum{}, o);
        for (std::size_t i = 0; i < n; ++i) {
          std::int32_t want = 0;
          for (int r = 0; r < world; ++r) want += pattern(n, r, budget)[i];
          bad[rank] += out[i] != want;
        }
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("copy engine only: all_gather and broadcast into registered buffers, every world, root, size") {
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    basic_world<host> w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      const std::size_t max_n = 3001;
      std::vector<std::int32_t> out(max_n * world), bin(max_n);
      c.register_buffer(out.data(), out.size() * sizeof(std::int32_t));
      c.register_buffer(bin.data(), bin.size() * sizeof(std::int32_t));
      ark::call_options<host> ce;
      ce.max_ctas = 0;
      int call = 0;
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, max_n}) {
        for (bool in_place : {false, true}) {
          ++call;
          // all_gather
          std::fill(out.begin(), out.end(), -1);
          auto mine = pattern(n, rank, call);
          if (in_place) std::copy(mine.begin(), mine.end(), out.begin() + rank * n);
          c.all_gather(in_place ? out.data() + rank * n : mine.data(), out.data(), n, ce);
          for (int q = 0; q < world; ++q) {
            const auto theirs = pattern(n, q, call);
            for (std::size_t i = 0; i < n; ++i) bad[rank] += out[q * n + i] != theirs[i];
          }
          for (std::size_t i = n * world; i < out.size(); ++i) bad[rank] += out[i] != -1; // nothing past the end
          // an ordinary call in between: the channels stay consistent
          std::vector<std::int32_t> s(n + 5, rank + 1), r(n + 5);
          c.all_reduce(s.data(), r.data(), n + 5);
          for (auto x : r) bad[rank] += x != world * (world + 1) / 2;
          // broadcast from every root
          for (int root = 0; root < world; ++root) {
            std::fill(bin.begin(), bin.end(), -1);
            auto src = pattern(n, root, call + 100);
            if (in_place && rank == root) std::copy(src.begin(), src.end(), bin.begin());
            c.broadcast(in_place && rank == root ? bin.data() : src.data(), bin.data(), n, root, ce);
            for (std::size_t i = 0; i < n; ++i) bad[rank] += bin[i] != src[i];
            for (std::size_t i = n; i < bin.size(); ++i) bad[rank] += bin[i] != -1;
          }
        }
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("copy engine only: clear errors before anything launches") {
  basic_world<host> w(2);
  std::vector<std::string> errors(2);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(64, 1.0f), out(128, -1.0f);
    ark::call_options<host> ce;
    ce.max_ctas = 0;
    try {
      c.all_gather(in.data(), out.data(), 64, ce);
    } catch (const ark::invalid_argument& e) {
      errors[rank] = e.what();
    }
    CHECK(out[0] == -1.0f);
    CHECK_THROWS_AS(c.all_reduce(in.data(), in.data(), 64, ark::op::sum{}, ce), ark::invalid_argument);
    c.register_buffer(out.data(), 64 * sizeof(float)); // too small for 2 x 64 elements
    CHECK_THROWS_AS(c.all_gather(in.data(), out.data(), 64, ce), ark::invalid_argument);
  });
  for (const auto& e : errors) CHECK(e.find("register the recv buffer") != std::string::npos);
  // without the engine's queues
  auto cfg = small_config<host>();
  cfg.team.staging = false;
  basic_world<host> bare(2, cfg);
  bare.run([&](comm_t& c, int) {
    std::vector<float> in(8, 1.0f), out(16);
    c.register_buffer(out.data(), out.size() * sizeof(float));
    ark::call_options<host> ce;
    ce.max_ctas = 0;
    CHECK_THROWS_AS(c.all_gather(in.data(), out.data(), 8, ce), ark::invalid_argument);
  });
}
