// tests/nccl/on_ranks.hpp: the NCCL API's host tests run each rank as a thread of this process.
#pragma once

#include "nccl/core.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ark_test {

namespace nc = ark::nccl;
using ncomm = nc::comm<ark::platform::host>;

/// Every rank's thread runs f(rank, its comm) on a fresh id.
inline void on_ranks(int world, const std::function<void(int, ncomm*)>& f) {
  const nc::unique_id id = nc::make_id();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ncomm* c = nullptr;
      const nc::result res = nc::init_rank<ark::platform::host>(&c, world, id, r, {});
      if (res != nc::result::success) {
        errors[r] = "init: " + nc::last_error_text();
        return;
      }
      try {
        f(r, c);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      } catch (...) { // a failed REQUIRE, reported where it failed
        errors[r] = "stopped by a failed assertion";
      }
      nc::destroy<ark::platform::host>(c, false);
    });
  for (auto& t : threads) t.join();
  nc::reaper<ark::platform::host>::get().join();
  for (int r = 0; r < world; ++r) CHECK_MESSAGE(errors[r].empty(), "rank ", r, ": ", errors[r]);
}

} // namespace ark_test
