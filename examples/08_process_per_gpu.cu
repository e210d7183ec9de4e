// examples/08_process_per_gpu.cu: one process a rank, as most jobs run. The ranks meet over a Unix
// socket (ark::unix_socket_bootstrap: rank 0 listens on a path, the others connect) and reach each
// other's memory through CUDA or HIP IPC. This program forks its ranks itself; under a launcher,
// take the rank and world from it instead (mpirun: ark::mpi_bootstrap, docs/guide.md, "Beyond one node").
// Built by a C++ compiler, the ranks are processes of the host platform, which cannot share memory:
// the program says so and stops.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 08_process_per_gpu.cu -o per_gpu
//   hipcc -std=c++20 -x hip       -I ark/include 08_process_per_gpu.cu -o per_gpu
//   ./per_gpu [ranks]     (default: one a GPU; more ranks than GPUs share them)
#include "ark/ark.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc

/// Rank `rank` of `world`, in its own process: the same all-reduce as examples/00.
bool rank_main(const std::string& socket, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t n = 1 << 20;
  std::vector<float> host(n, static_cast<float>(rank + 1));
  P::memory buffer = P::allocate(n * sizeof(float), device);
  auto* grad = reinterpret_cast<float*>(buffer.ptr);
  P::copy(grad, host.data(), n * sizeof(float));
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::unix_socket_bootstrap(socket, rank, world), cfg);
    comm.all_reduce(grad, grad, n);
    comm.synchronize();
  }
  P::copy(host.data(), grad, n * sizeof(float));
  P::release(buffer);
  const float want = world * (world + 1) / 2.0f;
  return std::all_of(host.begin(), host.end(), [&](float v) { return v == want; });
}

int main(int argc, char** argv) {
  if constexpr (P::synchronous_launch) {
    std::puts(
        "per_gpu: skipped: the host platform's ranks are threads of one process (build with nvcc or hipcc)");
    return 0;
  }
  // The GPU count is asked in a child: a process that has used CUDA must not fork ranks that use it.
  const pid_t probe = ::fork();
  if (probe == 0) std::_Exit(std::min(P::device_count(), 255));
  int st = 0;
  ::waitpid(probe, &st, 0);
  const int gpus = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
  if (gpus < 1) return std::puts("per_gpu: skipped: no GPU visible"), 0;
  const int world = argc > 1 ? std::atoi(argv[1]) : gpus;
  if (world < 1 || world > ark::max_world)
    return std::fprintf(stderr, "usage: %s [ranks, 1 to %d]\n", argv[0], ark::max_world), 64;
  const std::string socket = "/tmp/ark-example-" + std::to_string(::getpid()) + ".sock";
  std::vector<pid_t> ranks;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) { // the rank's process
      int ok = 0;
      try {
        ok = rank_main(socket, r, world);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::_Exit(ok ? 0 : 1);
    }
    ranks.push_back(pid);
  }
  int passed = 0;
  for (pid_t pid : ranks) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    passed += WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  std::printf("%s: all-reduce of 1 Mi floats over %d processes: %s\n", P::name, world,
              passed == world ? "correct" : "WRONG");
  return passed == world ? 0 : 1;
}
