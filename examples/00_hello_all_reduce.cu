// examples/00_hello_all_reduce.cu: the smallest complete ark program. An all-reduce (sum) over
// every GPU of this machine, one host thread a GPU; built by a C++ compiler, the same program runs
// over the host platform (ranks as CPU threads), 4 ranks by default.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 00_hello_all_reduce.cu -o hello
//   hipcc -std=c++20 -x hip       -I ark/include 00_hello_all_reduce.cu -o hello
//   g++   -std=c++20 -x c++       -I ark/include 00_hello_all_reduce.cu -o hello -pthread
//   ./hello [ranks]
// (ark/ is this repository.) More ranks than GPUs share them: set CUDA_MODULE_LOADING=EAGER and
// CUDA_DEVICE_MAX_CONNECTIONS=32 first (docs/guide.md, "Ranks that share a GPU").
// readme:begin hello
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

/// One rank: a buffer on its device, a communicator, one all-reduce, the result checked.
bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count(); // this rank's GPU
  const std::size_t n = 1 << 20;
  // device memory before the communicator, freed after its end: where ranks share a GPU, a free
  // waits for every kernel on it, a peer's collective too (docs/guide.md, "Ranks that share a GPU")
  P::memory buffer = P::allocate(n * sizeof(float), device);
  auto* grad = reinterpret_cast<float*>(buffer.ptr);
  std::vector<float> host(n, static_cast<float>(rank + 1));
  P::copy(grad, host.data(), n * sizeof(float));
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    comm.all_reduce(grad, grad, n); // in place, sum; the algorithm picked by size and world
    comm.synchronize();             // waits for the communicator's stream; throws if the call failed
  }                                 // the communicator's end waits for every rank
  P::copy(host.data(), grad, n * sizeof(float));
  P::release(buffer);
  const float want = world * (world + 1) / 2.0f;
  for (float v : host)
    if (v != want) return false;
  return true;
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("hello: skipped: no GPU visible"), 0;
  const int world = argc > 1 ? std::atoi(argv[1]) : P::synchronous_launch ? 4 : P::device_count();
  if (world < 1 || world > ark::max_world)
    return std::fprintf(stderr, "usage: %s [ranks, 1 to %d]\n", argv[0], ark::max_world), 64;
  auto group = std::make_shared<ark::in_process_group>(world); // where the rank threads meet
  std::vector<int> ok(world, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        ok[r] = rank_main(group, r, world);
      } catch (const std::exception& e) { // a bad argument, a peer that never came: a clear error
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
    });
  for (auto& t : ranks) t.join();
  const bool all = std::count(ok.begin(), ok.end(), 1) == world;
  std::printf("%s: all-reduce of 1 Mi floats over %d ranks: %s\n", P::name, world, all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
// readme:end
