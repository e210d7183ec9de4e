// tests/bootstrap/fork_ranks.hpp: ranks as forked processes, for the socket bootstraps' tests, and
// the checks every such bootstrap passes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace {
/// Runs body(rank) in `world` forked processes; returns how many exited with status 0.
template <class F>
int in_processes(int world, F body) {
  std::vector<pid_t> kids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = body(r) ? 0 : 1;
      } catch (...) {
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  int ok = 0;
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

/// Twenty rounds of all_gather in rank order, each followed by a barrier.
template <class Boot>
bool gathers_in_rank_order(Boot& b, int rank, int world) {
  if (b.rank() != rank || b.size() != world) return false;
  for (int round = 0; round < 20; ++round) {
    const int mine[2] = {rank * 10, round};
    std::vector<int> all(2 * world);
    b.all_gather(mine, all.data(), sizeof mine);
    for (int q = 0; q < world; ++q)
      if (all[2 * q] != q * 10 || all[2 * q + 1] != round) return false;
    b.barrier();
  }
  return true;
}

/// Two splits of a four-rank bootstrap by rank % 2, keys descending (new ranks run backwards):
/// each group of two gathers in its new rank order, the second split meeting apart from the first.
template <class Boot>
bool splits_by_parity(Boot& b, int rank) {
  for (int round = 0; round < 2; ++round) {
    auto sub = b.split(rank % 2, 4 - rank);
    if (sub.size() != 2 || sub.rank() != (rank < 2 ? 1 : 0)) return false;
    int all[2] = {-1, -1};
    sub.all_gather(&rank, all, sizeof rank);
    if (all[0] != rank % 2 + 2 || all[1] != rank % 2) return false;
  }
  return true;
}
} // namespace
