// The host DMA engine: the request queue on its own (posts return at once, at most Depth in
// flight, completion through a flag, a full queue times out), then every collective over it.
#include "../support/collective_check.hpp"

#include <chrono>

using namespace ark_test;

namespace {

/// A one-rank team built by hand, for testing a backend without a communicator.
struct solo_team {
  ark::layout lay;
  host::memory region;
  std::vector<std::byte> engine;
  ark::control_block ctl{};
  ark::team_view view{};
  explicit solo_team(std::chrono::milliseconds timeout) {
    ark::team_config tc;
    tc.workers = 1;
    tc.max_depth = 8;
    tc.slot_bytes = 256;
    tc.ll_slot_bytes = 256;
    lay = ark::make_layout(1, tc);
    region = host::allocate(lay.total, 0);
    engine.resize(ark::dma::engine_bytes(lay));
    view.rank = 0;
    view.world = 1;
    view.timeout_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(timeout).count());
    view.ctl = &ctl;
    view.lay = lay;
    view.base[0] = region.ptr;
    view.engine = engine.data();
  }
  ~solo_team() { host::release(region); }
};

} // namespace

TEST_CASE("proxy_engine: posts return at once, at most Depth are in flight, completion raises the flag") {
  using engine = ark::dma::proxy_engine<4>;
  solo_team t(std::chrono::milliseconds(100));
  ark::single_thread_scope g;
  const ark::context<host, engine, ark::single_thread_scope> ctx(g, t.view, 0, 1, ark::call_desc{});
  std::vector<std::vector<int>> src(5, std::vector<int>(256)), dst(5, std::vector<int>(256, -1));
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 256; ++i) src[k][i] = k * 1000 + i;
  std::uint64_t flag = 0;
  // no engine thread yet: four posts are accepted at once and nothing moves
  for (int k = 0; k < 4; ++k) REQUIRE(engine::post(ctx, dst[k].data(), src[k].data(), 1024, &flag, k + 1u));
  CHECK(flag == 0);
  CHECK(dst[0][0] == -1);
  CHECK(ark::dma::queue(t.lay, t.engine.data(), 0)->completed == 0);
  // a fifth would exceed Depth: it waits for the engine, and times out within the bound
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(engine::post(ctx, dst[4].data(), src[4].data(), 1024, &flag, 5));
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= std::chrono::milliseconds(100));
  CHECK(waited < std::chrono::milliseconds(2000));
  CHECK(t.ctl.err.code == static_cast<std::uint32_t>(ark::errc::timeout));
  CHECK(t.ctl.err.what == static_cast<std::uint32_t>(ark::wait_kind::engine));
  ark::clear_error(t.ctl); // forget the failure, record and claim word (later waits would end at once)
  *t.lay.claim(t.region.ptr) = 0;
  // the engine drains the queue in order and raises the flag after each copy
  ark::dma::host_proxy service;
  service.start(t.engine.data(), t.lay);
  REQUIRE(ctx.wait_geq(&flag, 4, ark::wait_kind::flag, 0));
  for (int k = 0; k < 4; ++k) CHECK(dst[k] == src[k]);
  CHECK(dst[4][0] == -1);
  REQUIRE(engine::post(ctx, dst[4].data(), src[4].data(), 1024, &flag, 5));
  REQUIRE(engine::flush(ctx));
  CHECK(dst[4] == src[4]);
  CHECK(flag == 5);
  CHECK(service.executed() == 5);
  service.stop();
}

TEST_CASE_TEMPLATE("proxy_engine: all_reduce, every algorithm, depth, dtype, world and size", T, float,
                   double, ark::fp16, ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::all_reduce, T>(
      type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>{},
      all_depths<ark::dma::proxy_engine>{}, type_list<ark::op::sum>{});
}

TEST_CASE("proxy_engine: every op, and every other collective") {
  using engine_depths = all_depths<ark::dma::proxy_engine>;
  run_matrix<ark::collective::all_reduce, double>(type_list<ark::algo::two_shot>{},
                                                  type_list<ark::dma::proxy_engine<3>>{}, all_ops{});
  run_matrix<ark::collective::reduce_scatter, float>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                     engine_depths{}, type_list<ark::op::min>{});
  run_matrix<ark::collective::all_gather, std::int64_t>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                        engine_depths{}, type_list<ark::op::sum>{});
  run_matrix<ark::collective::broadcast, ark::bf16>(type_list<ark::algo::direct>{}, engine_depths{},
                                                    type_list<ark::op::sum>{});
  run_matrix<ark::collective::reduce, std::uint8_t>(type_list<ark::algo::direct>{}, engine_depths{},
                                                    type_list<ark::op::avg>{});
}
