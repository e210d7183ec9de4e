// The in-process bootstrap: all_gather delivers every rank's bytes in rank order, repeatedly;
// sizes must agree; a missing rank is a timeout within the bound.
#include "ark/bootstrap/in_process.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

TEST_CASE("in_process bootstrap: all_gather in rank order, many rounds") {
  const int n = 5;
  auto group = std::make_shared<ark::in_process_group>(n);
  std::vector<std::vector<int>> got(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      ark::in_process_bootstrap b(group, r);
      for (int round = 0; round < 50; ++round) {
        const int mine[2] = {r, round};
        std::vector<int> all(2 * n);
        b.all_gather(mine, all.data(), sizeof mine);
        for (int q = 0; q < n; ++q)
          if (all[2 * q] != q || all[2 * q + 1] != round) got[r].push_back(round);
        b.barrier();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) CHECK(got[r].empty());
}

TEST_CASE("in_process bootstrap: a missing rank is a timeout, then the group stays broken") {
  using namespace std::chrono_literals;
  auto group = std::make_shared<ark::in_process_group>(3, 150ms);
  ark::in_process_bootstrap b(group, 1);
  int x = 1, all[3];
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(b.all_gather(&x, all, sizeof x), ark::timeout_error);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 150ms);
  CHECK(took < 2s);
  CHECK_THROWS_AS(b.barrier(), ark::timeout_error);
}
