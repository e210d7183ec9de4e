// LL packets: every collective and algorithm x depth x dtype over the LL backend, every op once.
#include "../support/collective_check.hpp"

#include <random>

using namespace ark_test;

using ll_depths = all_depths<ark::dma::ll_packet>;

TEST_CASE_TEMPLATE("ll_packet: all_reduce, every algorithm, depth, dtype, world and size", T, float, double,
                   ark::fp16, ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::all_reduce, T>(
      type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>{}, ll_depths{},
      type_list<ark::op::sum>{});
}

// Several threads per worker: shares of up to 16 threads x one 8-byte vector take the
// single-step path (one_shot.hpp; float up to 32 elements, bf16 64, int64 16), larger ones the
// pipelined path (200 elements: several steps).
TEST_CASE_TEMPLATE("ll_packet: one-shot single-step path, every depth, op and world", T, float, ark::bf16,
                   std::int64_t) {
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_shot>{}, ll_depths{}, all_ops{},
                                             small_config(16), {1, 2, 3, 4}, {1, 7, 16, 31, 33, 64, 65, 200});
}

TEST_CASE("ll_packet: single-step calls back to back, between pipelined and thread-copy calls") {
  test_world w(3, small_config(16));
  w.run([](comm_t& c, int rank) {
    std::vector<float> in(301), out(301);
    for (int k = 0; k < 60; ++k) {
      const std::size_t n = 1 + (k * 37) % 300; // single step up to 32, pipelined above
      for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i + k + rank) % 11);
      std::fill(out.begin(), out.end(), -1.0f);
      if (k % 5 == 4)
        c.all_reduce<ark::algo::one_shot, ark::dma::thread_copy<2>>(in.data(), out.data(), n);
      else
        c.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<2>>(in.data(), out.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(out[i] == static_cast<float>((i + k) % 11 + (i + k + 1) % 11 + (i + k + 2) % 11));
      REQUIRE(out[n] == -1.0f);
    }
  });
}

// A channel computed before its step (all_reduce_one_shot_ll's Early) gives, for every step, the
// slot, flag and tag tx and rx give by peer: every worker, peer and step over three wraps of the
// slots.
TEST_CASE("ll_packet: tx and rx on a channel computed beforehand are tx and rx by peer") {
  using B = ark::dma::ll_packet<2>;
  test_world w(3, small_config(16));
  w.run([](comm_t& c, int rank) {
    const ark::device_comm<host> h = c.device_handle();
    ark::host_team g(nullptr, 0, 1);
    const ark::layout& l = h.team.lay;
    for (unsigned wk = 0; wk < l.workers; ++wk)
      for (std::size_t count : {5u, 77u}) {
        const auto d = ark::call_desc::make(ark::collective::all_reduce, ark::algo::one_step::id, 0, 0, B::id,
                                            l.workers, 0, count);
        const auto ctx = h.make_context<B>(g, wk, l.workers, d);
        for (int p = 0; p < 3; ++p)
          for (std::uint64_t step = 0; step < 3 * l.ll_slots + 2; ++step) {
            const auto a = B::tx(ctx, p, step), b = B::tx(ctx, B::out_channel(ctx, p), step);
            CHECK(a.packets == b.packets);
            CHECK(a.flag == b.flag);
            CHECK(a.tagged == b.tagged);
            const auto r = B::rx(ctx, p, step), q = B::rx(ctx, B::in_channel(ctx, p), p, step);
            CHECK(r.packets == q.packets);
            CHECK(r.flag == q.flag);
            CHECK(r.tagged == q.tagged);
            CHECK(r.peer == q.peer);
            CHECK(r.step == q.step);
            if (p != rank) CHECK(a.packets != r.packets); // a peer's memory, and ours
          }
      }
  });
}

// A packet's first half carries 32 bits of the step's flag: one left in a slot 2^32 steps before
// has the same. Its second half must differ, whatever the tag.
TEST_CASE("ll_packet: a packet 2^32 steps old does not pass for the step's") {
  namespace d = ark::dma::detail;
  std::mt19937_64 rng(5);
  for (int k = 0; k < 1000; ++k) {
    const std::uint64_t step = k < 4 ? (std::uint64_t{1} << 32) * k - 1 : rng() >> (rng() % 40);
    const auto tag = static_cast<std::uint32_t>(rng());
    for (std::uint64_t wraps : {1u, 2u, 3u, 255u}) {
      const std::uint64_t later = step + (wraps << 32);
      REQUIRE(d::ll_flag(later) == d::ll_flag(step));
      REQUIRE(d::ll_tagged(later, tag) != d::ll_tagged(step, tag));
    }
  }
}

TEST_CASE("ll_packet: every op, and every other collective") {
  run_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::one_shot, ark::algo::ring>{},
                                                 type_list<ark::dma::ll_packet<2>>{}, all_ops{});
  run_matrix<ark::collective::reduce_scatter, std::int32_t>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                            ll_depths{}, type_list<ark::op::max>{});
  run_matrix<ark::collective::all_gather, ark::fp16>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                     ll_depths{}, type_list<ark::op::sum>{});
  run_matrix<ark::collective::broadcast, std::uint8_t>(type_list<ark::algo::direct>{}, ll_depths{},
                                                       type_list<ark::op::sum>{});
  run_matrix<ark::collective::reduce, double>(type_list<ark::algo::direct>{}, ll_depths{},
                                              type_list<ark::op::prod>{});
}

// Credits implied by the previous single-step call (context::exchanged): with the fewest slots a
// channel can have (max_depth 1: two), one rank skewed by random sleeps, and multi-step one-shot
// and ring calls in between (after which credits are read again). A wrong implication overwrites
// a slot its peer has not read: that peer then waits for packets that never come (a timeout) or
// reads the wrong step's data. (The round stored before every thread read it failed here.)
TEST_CASE("ll_packet: single-step calls with implied credits, ranks skewed, two slots") {
  for (int world : {2, 3}) {
    auto cfg = small_config(16);
    cfg.team.max_depth = 1;
    cfg.timeout = std::chrono::milliseconds(5000);
    test_world w(world, cfg);
    w.run([world](comm_t& c, int rank) {
      std::mt19937 rng(static_cast<unsigned>(7 + rank));
      std::vector<std::int32_t> in(200), out(201);
      for (int k = 0; k < 300; ++k) {
        const std::size_t n = k % 10 == 9 ? 200 : 1 + (k * 13) % 32; // 200: several steps
        for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int32_t>((i * 7 + k) * (rank + 1));
        std::fill(out.begin(), out.end(), -1);
        if (rank == 1 && rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        if (k % 20 == 19)
          c.all_reduce<ark::algo::ring, ark::dma::ll_packet<1>>(in.data(), out.data(), n);
        else
          c.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<1>>(in.data(), out.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(out[i] == static_cast<std::int32_t>((i * 7 + k) * (world * (world + 1) / 2)));
        REQUIRE(out[n] == -1);
      }
    });
  }
}
