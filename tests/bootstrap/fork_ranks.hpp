// tests/bootstrap/fork_ranks.hpp: ranks as forked processes, for the socket bootstraps' tests.
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
} // namespace
