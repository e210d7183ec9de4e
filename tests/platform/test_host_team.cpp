// The host scope: the team barrier orders memory among its threads and ORs a predicate.
#include "ark/platform/host_team.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

TEST_CASE("host_team: sync orders writes, sync_any is true in every thread iff one thread said so") {
  const unsigned n = 5;
  ark::host_barrier bar(n);
  std::vector<int> slots(n, 0);
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < n; ++t)
    ts.emplace_back([&, t] {
      ark::host_team g(&bar, t, n);
      for (int round = 1; round <= 200; ++round) {
        slots[t] = round;
        g.sync(); // every slot of this round is visible after the barrier
        for (unsigned u = 0; u < n; ++u) wrong += slots[u] != round;
        const bool any = g.sync_any(t == static_cast<unsigned>(round) % n && round % 3 == 0);
        wrong += any != (round % 3 == 0);
        wrong += g.sync_any(false);
      }
    });
  for (auto& t : ts) t.join();
  CHECK(wrong == 0);
  ark::host_team alone(nullptr, 0, 1);
  CHECK(alone.sync_any(true));
  CHECK_FALSE(alone.sync_any(false));
}
