// Co-location controls on the host platform: the call plan reported before a call, the SM budget
// (max_ctas) capping blocks, the copy-engine collectives (dma::copy_engine; all_gather and
// broadcast also through max_ctas = 0) into registered buffers: random data, poisoned outputs,
// in place and not, every root, op and dtype, several scratch rounds, repeated calls interleaved
// with ordinary ones, and the errors for what they cannot do.
#include "../support/collective_check.hpp"

#include <chrono>
#include <cstring>
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
    const auto free_plan =
        c.plan<ark::collective::all_reduce, ark::algo::ring, ark::dma::thread_copy<2>, float>(1 << 20, o);
    CHECK(free_plan.ctas == 3); // 4 MB over 4 KB per worker, capped by team_config.workers
    CHECK(free_plan.algorithm == ark::algo::ring::id);
    CHECK(free_plan.backend == ark::dma::thread_copy<2>::id);
    CHECK_FALSE(free_plan.copy_engine_only);
    CHECK(free_plan.scratch_bytes > 0);
    CHECK(free_plan.scratch_bytes <= c.scratch_bytes());
    o.max_ctas = 2;
    const auto capped =
        c.plan<ark::collective::all_reduce, ark::algo::ring, ark::dma::thread_copy<2>, float>(1 << 20, o);
    CHECK(capped.ctas == 2);
    CHECK(capped.scratch_bytes * 3 == free_plan.scratch_bytes * 2);
    o.max_ctas = 0;
    const auto ce =
        c.plan<ark::collective::all_gather, ark::algo::direct, ark::dma::automatic, float>(1000, o);
    CHECK(ce.copy_engine_only);
    CHECK(ce.ctas == 1);
    CHECK(ce.backend == ark::dma::copy_engine::id);
    CHECK_THROWS_AS(
        (c.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float>(10, o)),
        ark::invalid_argument);
    o.max_ctas = -2;
    CHECK_THROWS_AS(
        (c.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float>(10, o)),
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
        c.all_reduce<ark::algo::two_shot, ark::dma::thread_copy<4>>(in.data(), out.data(), n, ark::op::sum{},
                                                                    o);
        std::vector<std::uint32_t> want(n, 0); // int32 sums wrap, as op::sum's do
        for (int r = 0; r < world; ++r) {
          const auto theirs = pattern(n, r, budget);
          for (std::size_t i = 0; i < n; ++i) want[i] += static_cast<std::uint32_t>(theirs[i]);
        }
        for (std::size_t i = 0; i < n; ++i) bad[rank] += out[i] != static_cast<std::int32_t>(want[i]);
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
          for (std::size_t i = n * world; i < out.size(); ++i)
            bad[rank] += out[i] != -1; // nothing past the end
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

TEST_CASE(
    "copy engine only: all_to_all, gather and scatter into registered buffers, every world, root, size") {
  for (int world : {1, 2, 3, 5}) {
    CAPTURE(world);
    basic_world<host> w(world);
    std::vector<std::size_t> bad(world, 0);
    w.run([&](comm_t& c, int rank) {
      const std::size_t max_n = 1001;
      std::vector<std::int32_t> out(max_n * world), in(max_n * world);
      c.register_buffer(out.data(), out.size() * sizeof(std::int32_t));
      ark::call_options<host> ce;
      ce.max_ctas = 0;
      int call = 0;
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, max_n}) {
        ++call;
        // all_to_all: block p of ours to rank p, block q of rank q's to us
        for (int p = 0; p < world; ++p) {
          const auto b = pattern(n, rank * world + p, call);
          std::copy(b.begin(), b.end(), in.begin() + p * n);
        }
        std::fill(out.begin(), out.end(), -1);
        c.all_to_all<ark::dma::copy_engine>(in.data(), out.data(), n);
        for (int q = 0; q < world; ++q) {
          const auto b = pattern(n, q * world + rank, call);
          for (std::size_t i = 0; i < n; ++i) bad[rank] += out[q * n + i] != b[i];
        }
        for (std::size_t i = n * world; i < out.size(); ++i) bad[rank] += out[i] != -1;
        for (int root = 0; root < world; ++root)
          for (bool in_place : {false, true}) {
            // gather: every rank's block at block `sender` of the root's out; the others' untouched
            std::fill(out.begin(), out.end(), -1);
            const auto mine = pattern(n, rank, call + 10 * root);
            if (in_place) std::copy(mine.begin(), mine.end(), out.begin() + rank * n);
            c.gather(in_place ? out.data() + rank * n : mine.data(), out.data(), n, root, ce);
            for (int q = 0; q < world; ++q) {
              const auto theirs = pattern(n, q, call + 10 * root);
              for (std::size_t i = 0; i < n; ++i)
                bad[rank] += out[q * n + i] != (rank == root || (in_place && q == rank) ? theirs[i] : -1);
            }
            // scatter: block p of the root's in to rank p
            std::fill(out.begin(), out.end(), -1);
            for (int p = 0; p < world; ++p) {
              const auto b = pattern(n, root * world + p, call + 20);
              std::copy(b.begin(), b.end(), (in_place ? out.begin() : in.begin()) + p * n);
            }
            if (in_place && rank != root) std::fill(out.begin(), out.end(), -1);
            // in place at the root; every rank's out at the same place of the registered buffer
            const std::size_t at = in_place ? root * n : 0;
            c.scatter(in_place ? out.data() : in.data(), out.data() + at, n, root, ce);
            const auto b = pattern(n, root * world + rank, call + 20);
            for (std::size_t i = 0; i < n; ++i) bad[rank] += out[at + i] != b[i];
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
  // the copy-engine path needs no staging (nor the engine's queues): it copies between
  // registered buffers and uses the data slots as the all-reduce's scratch
  auto cfg = small_config<host>();
  cfg.team.staging = false;
  basic_world<host> bare(2, cfg);
  std::vector<std::size_t> bad(2, 0);
  bare.run([&](comm_t& c, int rank) {
    std::vector<float> in(8, static_cast<float>(rank + 1)), out(16, -1.0f), sum(8, -1.0f);
    c.register_buffer(out.data(), out.size() * sizeof(float));
    c.register_buffer(sum.data(), sum.size() * sizeof(float));
    ark::call_options<host> ce;
    ce.max_ctas = 0;
    c.all_gather(in.data(), out.data(), 8, ce);
    for (int i = 0; i < 16; ++i) bad[rank] += out[i] != static_cast<float>(i / 8 + 1);
    c.all_reduce<ark::algo::automatic, ark::dma::copy_engine>(in.data(), sum.data(), 8);
    for (float x : sum) bad[rank] += x != 3.0f;
  });
  CHECK(bad[0] == 0);
  CHECK(bad[1] == 0);
}

TEST_CASE("copy engine: a deregistered buffer is refused, what is registered after it works") {
  basic_world<host> w(2);
  std::vector<std::size_t> bad(2, 0);
  std::vector<std::string> after(2), unknown(2), mismatch(2);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(8, static_cast<float>(rank + 1)), first(16, -1.0f), second(32, -1.0f);
    ark::call_options<host> ce;
    ce.max_ctas = 0;
    c.register_buffer(first.data(), first.size() * sizeof(float));
    c.all_gather(in.data(), first.data(), 8, ce);
    unknown[rank] = message_of<ark::invalid_argument>([&] { c.deregister_buffer(second.data()); });
    c.deregister_buffer(first.data());
    std::fill(first.begin(), first.end(), -1.0f);
    after[rank] = message_of<ark::invalid_argument>([&] { c.all_gather(in.data(), first.data(), 8, ce); });
    for (float x : first) bad[rank] += x != -1.0f; // refused before anything moved
    // registered again: two windows in one allocation, then the first undone, the second kept
    c.register_buffer(second.data(), 16 * sizeof(float));
    c.register_buffer(second.data() + 16, 16 * sizeof(float));
    c.all_gather(in.data(), second.data() + 16, 8, ce);
    c.all_gather(in.data(), second.data(), 8, ce);
    for (int i = 0; i < 32; ++i) bad[rank] += second[i] != static_cast<float>(i % 16 / 8 + 1);
    // each rank undoes another one: refused on both, both kept
    mismatch[rank] = message_of<ark::invalid_argument>(
        [&] { c.deregister_buffer(rank == 0 ? second.data() : second.data() + 16); });
    c.all_gather(in.data(), second.data(), 2, ce);
    c.all_gather(in.data(), second.data() + 16, 2, ce);
    for (int i = 0; i < 4; ++i)
      bad[rank] +=
          second[i] != static_cast<float>(i / 2 + 1) || second[16 + i] != static_cast<float>(i / 2 + 1);
    c.deregister_buffer(second.data());
    c.all_gather(in.data(), second.data() + 16, 4, ce); // the other one stays
    for (int i = 0; i < 8; ++i) bad[rank] += second[16 + i] != static_cast<float>(i / 4 + 1);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(bad[r] == 0);
    CHECK(contains(unknown[r], "no buffer was registered"));
    CHECK(contains(after[r], "register the recv buffer"));
    CHECK(contains(mismatch[r], "nothing was undone"));
  }
}

namespace {
template <class T>
bool same(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// chunk: communicator::config::ce_chunk_bytes (0: the default, then half the scratch part bounds
/// a round)
template <class T, class Op>
void ce_all_reduce_case(int world, std::size_t chunk = 0) {
  auto cfg = small_config<host>();
  if (chunk) cfg.ce_chunk_bytes = chunk;
  basic_world<host> w(world, cfg);
  std::vector<std::size_t> bad(world, 0);
  // the small team's scratch holds 3 x 9 x 1 KB per sender: the largest sizes take several rounds
  const std::vector<std::size_t> sizes{0, 1, 7, 1000, 30011};
  auto value = [](std::size_t i, int rank, int call) {
    return static_cast<T>(static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 13 + call) % 11) + 1);
  };
  w.run([&](comm_t& c, int rank) {
    const std::size_t max_n = sizes.back();
    std::vector<T> out(max_n), in(max_n);
    c.register_buffer(out.data(), out.size() * sizeof(T));
    int call = 0;
    for (std::size_t n : sizes)
      for (bool in_place : {false, true}) {
        ++call;
        std::fill(out.begin(), out.end(), static_cast<T>(-3));
        T* src = in_place ? out.data() : in.data();
        for (std::size_t i = 0; i < n; ++i) src[i] = value(i, rank, call);
        c.all_reduce<ark::algo::automatic, ark::dma::copy_engine>(src, out.data(), n, Op{});
        for (std::size_t i = 0; i < n; ++i) {
          ark::acc_t<T> acc = ark::to_acc(value(i, 0, call));
          for (int r = 1; r < world; ++r) acc = Op{}(acc, ark::to_acc(value(i, r, call)));
          if constexpr (ark::finalizing_op<Op, T>) acc = Op{}.finalize(acc, world);
          bad[rank] += !same(out[i], ark::from_acc<T>(acc));
        }
        for (std::size_t i = n; i < max_n; ++i) bad[rank] += !same(out[i], static_cast<T>(-3));
        // an ordinary call in between
        std::vector<float> a(17, 1.0f), b(17);
        c.all_reduce(a.data(), b.data(), 17);
        for (float x : b) bad[rank] += x != static_cast<float>(world);
      }
  });
  for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
}
} // namespace

TEST_CASE("copy engine all_reduce: every world, op and dtype, in place and not, several rounds") {
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    ce_all_reduce_case<float, ark::op::sum>(world);
    ce_all_reduce_case<std::int32_t, ark::op::max>(world);
  }
  ce_all_reduce_case<double, ark::op::prod>(3);
  ce_all_reduce_case<ark::bf16, ark::op::avg>(4);
  ce_all_reduce_case<ark::fp16, ark::op::min>(2);
  ce_all_reduce_case<std::uint8_t, ark::op::sum>(3);
  ce_all_reduce_case<std::int64_t, ark::op::sum>(2);
  // small rounds: 61 and 70 per call at the largest size, odd and even counts, each through one
  // half of the scratch
  ce_all_reduce_case<float, ark::op::sum>(2, 1000);
  ce_all_reduce_case<ark::fp16, ark::op::max>(3, 300);
}

namespace {
/// The copy-engine flags' scratch: all that a copy-engine all_gather uses.
std::size_t ce_flag_scratch(const comm_t& c) {
  ark::call_options<host> o;
  o.max_ctas = 0;
  return c.plan<ark::collective::all_gather, ark::algo::automatic, ark::dma::copy_engine, float>(1, o)
      .scratch_bytes;
}
} // namespace

TEST_CASE("copy engine all_reduce: its plan, and clear errors before anything moves") {
  basic_world<host> w(2);
  w.run([&](comm_t& c, int) {
    std::vector<float> in(100, 1.0f), out(100, -1.0f);
    using ce = ark::dma::copy_engine;
    ark::call_options<host> o;
    const auto p = c.plan<ark::collective::all_reduce, ark::algo::automatic, ce, float>(100, o);
    CHECK(p.backend == ce::id);
    CHECK(p.ctas >= 1);
    // the scratch a call touches: its flags, and per peer the longest chunk (52 of 100 floats,
    // cut on 4-element boundaries) in one round
    const std::size_t flags = ce_flag_scratch(c);
    CHECK(flags > 0);
    CHECK(p.scratch_bytes == flags + 52 * sizeof(float));
    o.max_ctas = 1;
    CHECK(c.plan<ark::collective::all_reduce, ark::algo::automatic, ce, float>(1 << 20, o).ctas == 1);
    CHECK_THROWS_AS((c.all_reduce<ark::algo::automatic, ce>(in.data(), out.data(), 100)),
                    ark::invalid_argument);
    CHECK(out[0] == -1.0f);
    c.register_buffer(out.data(), out.size() * sizeof(float));
    o.max_ctas = 0;
    CHECK_THROWS_AS((c.all_reduce<ark::algo::automatic, ce>(in.data(), out.data(), 100, ark::op::sum{}, o)),
                    ark::invalid_argument);
    c.all_reduce<ark::algo::automatic, ce>(in.data(), out.data(), 100);
    CHECK(out[99] == 2.0f);
  });
}

TEST_CASE("copy engine all_reduce: the scratch its plan reports is the two scratch halves of its rounds") {
  // 1000-byte rounds: 248 floats (on 4-element boundaries). Each peer's part of our scratch
  // holds the even rounds' parts of the longest chunk in one half, the odd rounds' in the other
  auto cfg = small_config<host>();
  cfg.ce_chunk_bytes = 1000;
  for (int world : {2, 3}) {
    CAPTURE(world);
    basic_world<host> w(world, cfg);
    w.run([&](comm_t& c, int) {
      using ce = ark::dma::copy_engine;
      const ark::call_options<host> o;
      const std::size_t flags = ce_flag_scratch(c);
      auto data = [&](std::size_t count) {
        return c.plan<ark::collective::all_reduce, ark::algo::automatic, ce, float>(count, o).scratch_bytes -
               flags;
      };
      const std::size_t peers = static_cast<std::size_t>(world - 1);
      CHECK(data(4 * static_cast<std::size_t>(world)) == peers * 4 * sizeof(float));     // one round of 4
      CHECK(data(248 * static_cast<std::size_t>(world)) == peers * 992);                 // one full round
      CHECK(data(300 * static_cast<std::size_t>(world)) == peers * 300 * sizeof(float)); // 248 + 52
      CHECK(data(600 * static_cast<std::size_t>(world)) == peers * 2 * 992);             // 248, 248, 104
      CHECK(data(std::size_t{1} << 24) == peers * 2 * 992);                              // many rounds
    });
  }
}

TEST_CASE("copy engine all_reduce: a peer that comes after the call failed gets an error too") {
  ce_all_reduce_late_peer<host>(small_config<host>());
}

TEST_CASE("copy engine: a peer that never joins is a timeout error within the bound, nothing copied") {
  using namespace std::chrono_literals;
  basic_world<host> w(2);
  std::chrono::milliseconds took{};
  std::vector<float> peer_out(16, -1.0f);
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    std::vector<float> in(8, 5.0f), own(16, -1.0f);
    c.register_buffer(rank == 0 ? own.data() : peer_out.data(), 16 * sizeof(float));
    if (rank != 0) return; // never calls
    ark::call_options<host> o;
    o.max_ctas = 0;
    o.timeout = 200ms;
    time_until_throw(took, [&] { c.all_gather(in.data(), own.data(), 8, o); });
  });
  REQUIRE(errs[0]);
  CHECK_THROWS_AS(std::rethrow_exception(errs[0]), ark::timeout_error);
  CHECK(took >= 200ms);
  CHECK(took < 2000ms);
  for (float x : peer_out) CHECK(x == -1.0f); // the wait failed before any copy into the peer
}

TEST_CASE("copy engine: recv buffers at different places on different ranks are an error, nothing copied") {
  // the copies go to each peer's registered buffer at *our* offset: ranks that disagree on the
  // window or the offset would write outside each other's outputs; their flags never match
  using namespace std::chrono_literals;
  enum class differ { offset, window };
  for (const differ how : {differ::offset, differ::window})
    for (const bool reduce : {false, true}) {
      CAPTURE(static_cast<int>(how));
      CAPTURE(reduce);
      basic_world<host> w(2);
      std::vector<std::int32_t> bufs[2][2]; // [rank][window]
      const auto errs = w.try_run([&](comm_t& c, int rank) {
        for (auto& b : bufs[rank]) {
          b.assign(16, -1);
          c.register_buffer(b.data(), b.size() * sizeof(std::int32_t));
        }
        const bool shifted = rank == 1;
        std::int32_t* out = how == differ::offset ? bufs[rank][0].data() + (shifted ? 8 : 0)
                                                  : bufs[rank][shifted ? 1 : 0].data();
        std::vector<std::int32_t> in(8, rank + 10);
        ark::call_options<host> o;
        o.timeout = 200ms;
        if (reduce) {
          c.all_reduce<ark::algo::automatic, ark::dma::copy_engine>(in.data(), out, 8, ark::op::sum{}, o);
        } else {
          o.max_ctas = 0;
          c.all_gather(in.data(), out, 4, o);
        }
      });
      for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        REQUIRE(errs[r]);
        CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::timeout_error);
        for (const auto& b : bufs[r])
          for (const auto x : b) CHECK(x == -1);
      }
    }
}
