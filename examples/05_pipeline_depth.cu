// examples/05_pipeline_depth.cu: the pipeline depth is a template parameter. Depth is how many
// pipeline steps a sender may run ahead of its receiver: with depth 1 every slot-sized piece
// waits for the previous one to be acknowledged; deeper pipelines overlap the transfer of one
// piece with the reduction of the previous. Times a ring all-reduce per depth.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 05_pipeline_depth.cu -o depth
//   hipcc -std=c++20 -x hip       -I ark/include 05_pipeline_depth.cu -o depth
//   g++   -std=c++20 -x c++       -I ark/include 05_pipeline_depth.cu -o depth -pthread
//   ./depth [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

/// Microseconds a ring all-reduce of n floats takes over thread copies `Depth` steps deep.
template <unsigned Depth>
double time_ring(ark::communicator<P>& comm, float* data, std::size_t n) {
  using backend = ark::dma::thread_copy<Depth>;
  comm.all_reduce<ark::algo::ring, backend>(data, data, n); // warm up
  comm.synchronize();
  const int iters = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm.all_reduce<ark::algo::ring, backend>(data, data, n);
  comm.synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t n = P::synchronous_launch ? (2u << 20) : (64u << 20); // floats
  P::memory buffer = P::allocate(n * sizeof(float), device); // before the communicator (example 00)
  auto* data = reinterpret_cast<float*>(buffer.ptr);
  double us[4] = {};
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    cfg.team.max_depth = 8; // slots for the deepest pipeline timed here
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    us[0] = time_ring<1>(comm, data, n);
    us[1] = time_ring<2>(comm, data, n);
    us[2] = time_ring<4>(comm, data, n);
    us[3] = time_ring<8>(comm, data, n);
  }
  P::release(buffer);
  if (rank == 0)
    std::printf("%s, %d ranks, ring all-reduce of %zu MB: depth 1 %.0f us, 2 %.0f us, 4 %.0f us, 8 %.0f us\n",
                P::name, world, n * 4 >> 20, us[0], us[1], us[2], us[3]);
  return true;
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("depth: skipped: no GPU visible"), 0;
  const int world = argc > 1 ? std::atoi(argv[1]) : P::synchronous_launch ? 4 : P::device_count();
  if (world < 1 || world > ark::max_world)
    return std::fprintf(stderr, "usage: %s [ranks, 1 to %d]\n", argv[0], ark::max_world), 64;
  auto group = std::make_shared<ark::in_process_group>(world);
  std::vector<int> ok(world, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        ok[r] = rank_main(group, r, world);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
    });
  for (auto& t : ranks) t.join();
  const bool all = std::count(ok.begin(), ok.end(), 1) == world;
  if (!all) std::printf("%s: pipeline depths over %d ranks: FAILED\n", P::name, world);
  return all ? 0 : 1;
}
