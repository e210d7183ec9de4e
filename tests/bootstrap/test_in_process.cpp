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

TEST_CASE("in_process bootstrap: split groups ranks by color, orders them by key then rank, and nests") {
  const int n = 6;
  auto group = std::make_shared<ark::in_process_group>(n);
  std::vector<int> bad(n, 0);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      ark::in_process_bootstrap b(group, r);
      // colors 0, 1, 2 by r % 3; key descending, so the new ranks run backwards
      auto sub = b.split(r % 3, -r);
      bad[r] += sub.size() != 2;
      bad[r] += sub.rank() != (r < 3 ? 1 : 0);
      int all[2] = {-1, -1};
      sub.all_gather(&r, all, sizeof r);
      bad[r] += all[0] != r % 3 + 3 || all[1] != r % 3;
      // equal keys: the parent's rank order; a split of a split
      auto halves = b.split(r / 3, 0);
      auto pair = halves.split(halves.rank() / 2, 0);
      bad[r] += halves.size() != 3 || halves.rank() != r % 3;
      bad[r] += pair.size() != (r % 3 < 2 ? 2 : 1);
      std::vector<int> got(static_cast<std::size_t>(pair.size()));
      pair.all_gather(&r, got.data(), sizeof r);
      for (int q = 0; q < pair.size(); ++q) bad[r] += got[q] != r - pair.rank() + q;
      try {
        (void)b.split(-1, 0);
        ++bad[r];
      } catch (const ark::invalid_argument&) { // refused before any gather: no rank waits
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) CHECK(bad[r] == 0);
}
