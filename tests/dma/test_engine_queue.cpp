// An engine backend's request queues: one per worker (the collectives' and the point-to-point
// workers'), after one another in the rank's engine memory, none without staging.
#include "ark/dma/engine_queue.hpp"

#include <doctest/doctest.h>

TEST_CASE("engine queues: one per worker, after one another, none without staging") {
  ark::team_config c;
  c.workers = 3;
  c.max_depth = 4;
  c.slot_bytes = 4096;
  c.ll_slot_bytes = 1024;
  c.p2p_workers = 2;
  const ark::layout l = ark::make_layout(5, c);
  std::byte* base = nullptr;
  const std::uint32_t capacity = ark::dma::queue_capacity(l);
  CHECK(capacity == 2 * l.slots + 2);
  CHECK(l.all_workers() == 5);
  CHECK(reinterpret_cast<std::byte*>(ark::dma::requests(l, base, 4) + capacity) ==
        base + ark::dma::engine_bytes(l));
  CHECK(reinterpret_cast<std::byte*>(ark::dma::queue(l, base, 1)) ==
        reinterpret_cast<std::byte*>(ark::dma::requests(l, base, 0) + capacity));
  c.staging = false;
  CHECK(ark::dma::engine_bytes(ark::make_layout(5, c)) == 0);
}

TEST_CASE("engine queues: the mode bits say who serves them") {
  ark::team_view t;
  CHECK_FALSE(ark::dma::graphs_serve(t));
  t.engine_mode = ark::dma::served_by_graphs;
  CHECK(ark::dma::graphs_serve(t));
  CHECK_FALSE(ark::dma::launcher_runs(t));
  t.engine_mode |= ark::dma::launcher_beside;
  CHECK(ark::dma::launcher_runs(t));
}
