// The block cap for ranks that share a GPU: none unless a GPU is shared; otherwise the calls of
// every rank on each shared GPU fit its SMs at once, on the tightest GPU, and never below one.
#include "ark/team/residency.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {
ark::gpu_placement at(const char* pci, int sms, std::uint64_t process = 1, int queues = 8) {
  ark::gpu_placement p;
  std::snprintf(p.pci, sizeof p.pci, "%s", pci);
  p.sms = sms;
  p.queues = queues;
  p.process = process;
  return p;
}
} // namespace

TEST_CASE("residency: no cap unless ranks share a GPU") {
  const std::vector<ark::gpu_placement> own{at("0000:19:00.0", 132), at("0000:3b:00.0", 132),
                                            at("0000:4c:00.0", 132)};
  CHECK(ark::detail::shared_gpu_block_cap(own.data(), 3, 2, 0) == 0);
  CHECK(ark::detail::shared_gpu_block_cap(own.data(), 1, 2, 1) == 0);
  const std::vector<ark::gpu_placement> host(4); // the host platform reports no GPU
  CHECK(ark::detail::shared_gpu_block_cap(host.data(), 4, 2, 0) == 0);
}

TEST_CASE("residency: the cap splits a shared GPU's SMs, one left for the kernels beside") {
  const auto one = [](int ranks, int sms, unsigned kernels, unsigned persistent) {
    const std::vector<ark::gpu_placement> all(ranks, at("0000:19:00.0", sms));
    return ark::detail::shared_gpu_block_cap(all.data(), ranks, kernels, persistent);
  };
  CHECK(one(2, 132, 2, 0) == 32); // (132 - 1) / 4
  CHECK(one(3, 132, 2, 0) == 21); // three ranks on an H200 with early launch
  CHECK(one(4, 132, 2, 0) == 16);
  CHECK(one(3, 132, 1, 0) == 43); // launched plainly: one call resident per rank
  CHECK(one(2, 132, 2, 1) == 32); // a launcher each: (132 - 2 - 1) / 4
  CHECK(one(4, 132, 2, 1) == 15); // (132 - 4 - 1) / 8
  CHECK(one(4, 4, 2, 0) == 1);    // never below one block
  CHECK(one(2, 0, 2, 1) == 1);
  CHECK(one(3, 132, 0, 0) == 43); // no kernel count is taken as one
}

TEST_CASE("residency: ranks over several GPUs get the tightest shared GPU's cap") {
  // ranks 0 and 2 share GPU A; rank 1 has GPU B alone
  std::vector<ark::gpu_placement> all{at("0000:19:00.0", 132), at("0000:3b:00.0", 132),
                                      at("0000:19:00.0", 132)};
  CHECK(ark::detail::shared_gpu_block_cap(all.data(), 3, 2, 0) == 32);
  // a smaller GPU shared by two, a larger one by three: the smaller split wins
  all = {at("A", 132), at("B", 40), at("A", 132), at("B", 40), at("A", 132)};
  CHECK(ark::detail::shared_gpu_block_cap(all.data(), 5, 2, 0) == 9); // B: (40 - 1) / 4; A: 21
  // the bus id is compared whole: a common prefix is not the same GPU
  all = {at("0000:19:00.0", 132), at("0000:19:00.1", 132)};
  CHECK(ark::detail::shared_gpu_block_cap(all.data(), 2, 2, 0) == 0);
}

TEST_CASE("residency: on random placements every shared GPU's calls fit at once") {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 2000; ++trial) {
    const int world = 1 + static_cast<int>(rng() % 16), gpus = 1 + static_cast<int>(rng() % 8);
    const unsigned kernels = 1 + rng() % 2, persistent = rng() % 2;
    std::vector<int> sms(gpus);
    for (int& s : sms) s = 8 + static_cast<int>(rng() % 200);
    std::vector<ark::gpu_placement> all(world);
    std::map<int, int> sharing;
    for (int r = 0; r < world; ++r) {
      const int g = static_cast<int>(rng() % gpus);
      all[r] = at(("gpu" + std::to_string(g)).c_str(), sms[g]);
      ++sharing[g];
    }
    const unsigned cap = ark::detail::shared_gpu_block_cap(all.data(), world, kernels, persistent);
    bool shared = false;
    for (auto [g, n] : sharing) {
      if (n < 2) continue;
      shared = true;
      // what the ranks on g hold at once, and one SM to spare, fits; or the cap is the floor
      const long held = static_cast<long>(n) * (kernels * cap + persistent) + 1;
      CHECK((held <= sms[g] || cap == 1));
    }
    CHECK((cap == 0) == !shared);
    if (shared) { // and it is the largest such cap: one block more overflows some shared GPU
      bool overflows = false;
      for (auto [g, n] : sharing)
        if (n >= 2 && static_cast<long>(n) * (kernels * (cap + 1) + persistent) + 1 > sms[g])
          overflows = true;
      CHECK(overflows);
    }
  }
}

// The copy-engine collectives' hardware-queue check counts the ranks that share a context: one
// process and one GPU. Ranks of other processes on the same GPU have contexts of their own.
TEST_CASE("residency: the ranks that share a rank's context, itself included") {
  const std::vector<ark::gpu_placement> all{at("0000:19:00.0", 132, 7), at("0000:19:00.0", 132, 7),
                                            at("0000:19:00.0", 132, 8), at("0000:3b:00.0", 132, 7),
                                            at("0000:19:00.0", 132, 7)};
  CHECK(ark::detail::context_sharers(all.data(), 5, 0) == 3); // ranks 0, 1 and 4
  CHECK(ark::detail::context_sharers(all.data(), 5, 4) == 3);
  CHECK(ark::detail::context_sharers(all.data(), 5, 2) == 1); // the same GPU, another process
  CHECK(ark::detail::context_sharers(all.data(), 5, 3) == 1); // the same process, another GPU
  const std::vector<ark::gpu_placement> host(4);              // the host platform reports no GPU
  CHECK(ark::detail::context_sharers(host.data(), 4, 2) == 1);
  // the process alone does not make a context: every rank of one process on its own GPU
  const std::vector<ark::gpu_placement> spread{at("0000:19:00.0", 132), at("0000:3b:00.0", 132)};
  CHECK(ark::detail::context_sharers(spread.data(), 2, 0) == 1);
}

// Every rank refuses the same copy-engine calls: the share comes from the exchanged table, the
// tightest shared context deciding, whatever rank asks.
TEST_CASE("residency: the tightest shared context's hardware queues per rank") {
  const std::vector<ark::gpu_placement> own{at("0000:19:00.0", 132, 7), at("0000:3b:00.0", 132, 7)};
  CHECK(ark::detail::tightest_context(own.data(), 2).per_rank == static_cast<std::size_t>(-1));
  // three ranks of process 7 on GPU 19 with 8 queues (2 each), two of process 9 on GPU 3b with 32
  // (16 each), one of process 8 on GPU 19 alone in its context
  const std::vector<ark::gpu_placement> all{at("0000:19:00.0", 132, 7, 8),  at("0000:3b:00.0", 132, 9, 32),
                                            at("0000:19:00.0", 132, 7, 8),  at("0000:19:00.0", 132, 8, 1),
                                            at("0000:3b:00.0", 132, 9, 32), at("0000:19:00.0", 132, 7, 8)};
  const auto t = ark::detail::tightest_context(all.data(), 6);
  CHECK(t.per_rank == 2);
  CHECK(t.queues == 8);
  CHECK(t.ranks == 3);
  // with enough queues in process 7, process 9's context is the tightest
  auto more = all;
  for (int r : {0, 2, 5}) more[r].queues = 32;
  const auto u = ark::detail::tightest_context(more.data(), 6);
  CHECK(u.per_rank == 10);
  CHECK(u.ranks == 3);
  more[1].queues = more[4].queues = 16;
  CHECK(ark::detail::tightest_context(more.data(), 6).per_rank == 8);
  const std::vector<ark::gpu_placement> host(3); // no GPU: nothing shared
  CHECK(ark::detail::tightest_context(host.data(), 3).per_rank == static_cast<std::size_t>(-1));
}
