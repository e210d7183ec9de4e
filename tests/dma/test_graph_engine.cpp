// The device-graph engine (engine_path::device_graphs): how a request finds its pre-instantiated
// copy, the host model of the engine (a launcher thread and a pool that runs copies out of
// order) on its own and under every collective, and the configuration errors.
#include "../support/collective_check.hpp"

#include <chrono>

using namespace ark_test;

namespace {

ark::team_view fake_team(int world, int rank, const ark::team_config& tc) {
  ark::team_view t;
  t.world = world;
  t.rank = rank;
  t.lay = ark::make_layout(world, tc);
  for (int r = 0; r < world; ++r) t.base[r] = reinterpret_cast<std::byte*>(std::uintptr_t(r + 1) << 36);
  return t;
}

ark::engine_request copy_request(const void* dst, const void* src, std::size_t bytes) {
  ark::engine_request r{};
  r.dst = reinterpret_cast<std::uint64_t>(dst);
  r.src = reinterpret_cast<std::uint64_t>(src);
  r.bytes = bytes;
  return r;
}

} // namespace

TEST_CASE("graph engine: size classes are slot_bytes / 4^k, at least 16 KB, at most four") {
  ark::team_config tc;
  for (auto [slot, classes] : {std::pair<std::size_t, unsigned>{1024, 1},
                               {64 << 10, 2},
                               {256 << 10, 3},
                               {4 << 20, 4},
                               {64 << 20, 4}}) {
    tc.slot_bytes = slot;
    const ark::layout l = ark::make_layout(2, tc);
    CHECK(ark::dma::graph_classes(l) == classes);
    for (unsigned k = 0; k < classes; ++k) CHECK(ark::dma::graph_class_bytes(l, k) == slot >> (2 * k));
  }
}

TEST_CASE("graph engine: every staging slot routes to its copy; anything else has none") {
  ark::team_config tc;
  tc.workers = 3;
  tc.max_depth = 4;
  tc.slot_bytes = 64 << 10;
  const int world = 3, me = 1;
  const ark::team_view t = fake_team(world, me, tc);
  const ark::layout& l = t.lay;
  std::size_t routed = 0;
  for (unsigned w = 0; w < l.workers; ++w)
    for (int peer = 0; peer < world; ++peer)
      for (unsigned slot = 0; slot < l.slots; ++slot)
        for (std::size_t bytes :
             {std::size_t{1}, std::size_t{16 << 10}, std::size_t{(16 << 10) + 1}, std::size_t{64 << 10}}) {
          if (peer == me) continue; // no channel to ourselves
          const std::byte* src = l.stage(t.local(), l.link_of(w, me, peer), slot);
          std::byte* dst = l.data(t.base[peer], l.link_of(w, peer, me), slot);
          const ark::dma::graph_route g = ark::dma::route_request(t, w, copy_request(dst, src, bytes));
          REQUIRE(g.ok);
          ++routed;
          CHECK(g.peer == peer);
          CHECK(g.ticket == (w * world + unsigned(peer)) * l.slots + slot);
          CHECK(g.cls == (bytes <= (16u << 10) ? 1u : 0u));
          const ark::dma::graph_copy c = ark::dma::graph_copy_of(t, g.ticket, g.cls);
          CHECK(c.dst == dst);
          CHECK(c.src == src);
          CHECK(c.bytes >= bytes);
          CHECK(c.bytes == ark::dma::graph_class_bytes(l, g.cls));
          // the same slot with a wrong destination, a shifted source, an empty or oversized copy
          CHECK_FALSE(ark::dma::route_request(t, w, copy_request(dst + 256, src, bytes)).ok);
          CHECK_FALSE(ark::dma::route_request(t, w, copy_request(dst, src + 256, bytes)).ok);
          CHECK_FALSE(ark::dma::route_request(t, w, copy_request(dst, src, 0)).ok);
          CHECK_FALSE(ark::dma::route_request(t, w, copy_request(dst, src, l.slot_bytes + 1)).ok);
          CHECK_FALSE(ark::dma::route_request(t, (w + 1) % l.workers, copy_request(dst, src, bytes)).ok);
          // the peer's data slot of another worker, or our own data slot as the source
          CHECK_FALSE(ark::dma::route_request(
                          t, w, copy_request(dst, l.data(t.local(), l.link_of(w, me, peer), slot), bytes))
                          .ok);
        }
  CHECK(routed == std::size_t(l.workers) * (world - 1) * l.slots * 4);
  CHECK_FALSE(ark::dma::route_request(t, l.workers, copy_request(nullptr, nullptr, 1)).ok);
}

TEST_CASE(
    "graph engine: the host model serves posts in order, copies out of order, re-arms past 112 launches, "
    "retries refused launches") {
  // rank 0 of a two-rank team whose regions both live here; worker 0 posts to rank 1
  ark::team_config tc;
  tc.workers = 1;
  tc.max_depth = 4;
  tc.slot_bytes = 1024;
  ark::team_view t;
  t.world = 2;
  t.rank = 0;
  t.lay = ark::make_layout(2, tc);
  t.timeout_ns = 2000000000ull;
  host::memory region[2] = {host::allocate(t.lay.total, 0), host::allocate(t.lay.total, 0)};
  host::memory queues = host::allocate(ark::dma::engine_bytes(t.lay), 0);
  ark::control_block ctl{};
  t.base[0] = region[0].ptr;
  t.base[1] = region[1].ptr;
  t.engine = queues.ptr;
  t.ctl = &ctl;
  t.engine_mode = ark::dma::served_by_graphs;
  using engine = ark::dma::proxy_engine<4>;
  ark::single_thread_scope g;
  const ark::context<host, engine, ark::single_thread_scope> ctx(g, t, 0, 1, ark::call_desc{});
  ark::dma::host_graph_engine service;
  service.start(t);
  const ark::layout& l = t.lay;
  std::uint64_t* head = l.head(t.base[1], l.link_of(0, 1, 0));
  std::uint64_t bare = 0;
  const unsigned steps = 300; // three launcher executions at least
  for (unsigned s = 0; s < steps; ++s) {
    std::byte* stage = l.stage(t.local(), l.link_of(0, 0, 1), s);
    const std::size_t bytes = 1 + (s * 37) % l.slot_bytes;
    // the slot is free once the copy of step s - slots landed (the head flag shows it)
    REQUIRE(ctx.wait_geq(head, s + 1 > l.slots ? s + 1 - l.slots : 0, ark::wait_kind::flag, 1));
    for (std::size_t i = 0; i < bytes; ++i) stage[i] = static_cast<std::byte>((s * 131 + i) & 0xff);
    REQUIRE(engine::post(ctx, l.data(t.base[1], l.link_of(0, 1, 0), s), stage, bytes, head, s + 1));
    if (s % 50 == 49) { // a bare signal waits for every earlier copy of the worker
      REQUIRE(engine::post(ctx, nullptr, nullptr, 0, &bare, s + 1));
      REQUIRE(ctx.wait_geq(&bare, s + 1, ark::wait_kind::flag, 0));
      CHECK(*head == s + 1);
    }
    if (s + 1 == steps) {
      REQUIRE(engine::flush(ctx));
      CHECK(*head == steps);
      const std::byte* got = l.data(t.base[1], l.link_of(0, 1, 0), s);
      bool same = true;
      for (std::size_t i = 0; i < bytes; ++i) same &= got[i] == static_cast<std::byte>((s * 131 + i) & 0xff);
      CHECK(same);
    }
  }
  engine::finish(ctx); // the call's end: the launcher returns
  REQUIRE(ctx.wait_geq(&ark::dma::queue(l, t.engine, 0)->completed, steps + steps / 50 + 1,
                       ark::wait_kind::flag, 0));
  CHECK(service.launches() == steps);
  // waits at most 15 s for done(); returns how long it waited
  auto wait_until = [](auto done) {
    const auto t1 = std::chrono::steady_clock::now();
    while (!done() && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(15))
      std::this_thread::yield();
    return std::chrono::steady_clock::now() - t1;
  };
  wait_until([&] { return service.executions() >= 3; });
  CHECK(service.executions() == 3); // 112 + 112 + 76 launches: two re-arms and the call's end
  // a slot is reused as soon as its copy was signalled, while its graph is still ending: refused
  CHECK(service.refusals() > 0);
  CHECK(ark::read_error(ctl).code == 0);
  // a copy that is not a channel slot has no graph: recorded as unsupported, never copied
  std::vector<std::byte> elsewhere(64, std::byte{7});
  REQUIRE(engine::post(ctx, l.data(t.base[1], l.link_of(0, 1, 0), 0), elsewhere.data(), 64, nullptr, 0));
  wait_until([&] { return ark::read_error(ctl).code != 0; });
  const ark::error_record e = ark::read_error(ctl); // the launcher thread wrote it
  CHECK(e.code == static_cast<std::uint32_t>(ark::errc::unsupported));
  CHECK(e.what == static_cast<std::uint32_t>(ark::wait_kind::engine));
  // the rank failed: the launchers that follow copy and signal nothing more, they only take and
  // complete requests (the refused one, a copy, an end that counts one of two workers: that call
  // never ends), and return once nothing came for the bound (twice the team's timeout)
  std::byte* later_dst = l.data(t.base[1], l.link_of(0, 1, 0), 1);
  std::byte* later_src = l.stage(t.local(), l.link_of(0, 0, 1), 1);
  const std::byte old_byte = later_dst[0];
  for (std::size_t i = 0; i < 64; ++i) later_src[i] = ~old_byte;
  std::uint64_t later_flag = 0;
  REQUIRE(engine::post(ctx, later_dst, later_src, 64, &later_flag, 1));
  const ark::context<host, engine, ark::single_thread_scope> of_two(g, t, 0, 2, ark::call_desc{});
  engine::finish(of_two);
  ark::engine_queue* q = ark::dma::queue(l, t.engine, 0);
  const std::uint64_t posted = host::load_acquire(&q->posted);
  wait_until([&] { return host::load_acquire(&q->completed) == posted; });
  CHECK(host::load_acquire(&q->completed) == posted);
  const std::uint64_t executions = service.executions();
  const auto drained_for = wait_until([&] { return service.executions() > executions; });
  CHECK(service.executions() > executions);
  CHECK(drained_for < std::chrono::seconds(8));
  CHECK(host::load_acquire(&later_flag) == 0);
  CHECK(later_dst[0] == old_byte);
  service.stop();
  host::release(queues);
  host::release(region[0]);
  host::release(region[1]);
}

namespace {
template <class P = host>
typename ark::communicator<P>::config graph_config() {
  auto c = small_config<P>();
  c.engine = ark::engine_path::device_graphs;
  return c;
}
} // namespace

TEST_CASE_TEMPLATE("graph engine (host model): all_reduce, every algorithm and depth", T, float, ark::bf16,
                   std::int32_t) {
  run_matrix<ark::collective::all_reduce, T>(
      type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>{},
      all_depths<ark::dma::proxy_engine>{}, type_list<ark::op::sum>{}, graph_config(), {1, 2, 3, 4});
}

TEST_CASE("graph engine (host model): every op, every other collective, custom launches") {
  using engine_depths = type_list<ark::dma::proxy_engine<2>, ark::dma::proxy_engine<8>>;
  const std::vector<int> worlds{2, 3};
  run_matrix<ark::collective::all_reduce, double>(type_list<ark::algo::two_shot>{},
                                                  type_list<ark::dma::proxy_engine<3>>{}, all_ops{},
                                                  graph_config(), worlds);
  run_matrix<ark::collective::reduce_scatter, float>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                     engine_depths{}, type_list<ark::op::min>{},
                                                     graph_config(), worlds);
  run_matrix<ark::collective::all_gather, std::int64_t>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                        engine_depths{}, type_list<ark::op::sum>{},
                                                        graph_config(), worlds);
  run_matrix<ark::collective::broadcast, ark::fp16>(type_list<ark::algo::direct>{}, engine_depths{},
                                                    type_list<ark::op::sum>{}, graph_config(), worlds);
  run_matrix<ark::collective::reduce, std::uint8_t>(type_list<ark::algo::direct>{}, engine_depths{},
                                                    type_list<ark::op::avg>{}, graph_config(), worlds);
}

TEST_CASE("graph engine: configuration errors before anything runs") {
  auto c = graph_config();
  c.team.staging = false;
  basic_world<host> w(2, c);
  const auto errors = w.try_run([](ark::communicator<host>&, int) {}); // constructing failed on every rank
  for (const auto& e : errors) {
    REQUIRE(e);
    CHECK_THROWS_WITH_AS(std::rethrow_exception(e), doctest::Contains("needs staging"),
                         ark::invalid_argument);
  }
}

TEST_CASE("graph engine: device graphs serve the calls the communicator enqueues; the CPU proxy every call") {
  ark::team_view t;
  using engine = ark::dma::proxy_engine<2>;
  CHECK(engine::served(t)); // engine_path::proxy
  t.engine_mode = ark::dma::served_by_graphs;
  CHECK_FALSE(engine::served(t)); // a call from the user's own kernel: no launcher beside it
  t.engine_mode |= ark::dma::launcher_beside;
  CHECK(engine::served(t));
  // on the host platform the model's launcher is a thread: the device-side handle is served too
  basic_world<host> w(1, graph_config());
  w.run([](ark::communicator<host>& c, int) { CHECK(engine::served(c.device_handle().team)); });
}
