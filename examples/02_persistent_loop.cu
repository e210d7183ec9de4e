// examples/02_persistent_loop.cu: collectives called from inside your own device code. A
// persistent loop runs "compute gradients, all-reduce them" with no CPU on the path: each thread
// block is a worker that all-reduces its own share through the device handle. comm.launch runs it
// as one kernel of the communicator's (on the host platform, on its CPU threads); from a kernel of
// your own, call loop.run(block, blockIdx.x, gridDim.x) with an ark::block_scope.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 02_persistent_loop.cu -o persistent
//   hipcc -std=c++20 -x hip       -I ark/include 02_persistent_loop.cu -o persistent
//   g++   -std=c++20 -x c++       -I ark/include 02_persistent_loop.cu -o persistent -pthread
//   ./persistent [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

// readme:begin loop
/// One training step per iteration. Every block touches only its own share of `grad`: the share
/// its all-reduce covers, so no grid-wide barrier is needed between the steps.
struct training_loop {
  ark::device_comm<P> comm; // trivially copyable: passed to the kernel by value
  float* grad;
  std::size_t n;
  int steps;

  template <class Block>
  ARK_HD bool run(Block& block, unsigned worker, unsigned workers) const {
    const ark::elem_range mine = ark::split({0, n}, workers, worker, ark::align_elems<float>);
    for (int s = 0; s < steps; ++s) {
      for (std::size_t i = mine.begin + block.thread_rank(); i < mine.end(); i += block.size())
        grad[i] = static_cast<float>(comm.rank() + s); // "compute"
      block.sync(); // the call's threads read grad with their own mapping of elements
      if (!comm.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<2>>(block, worker, workers, grad, grad,
                                                                        n))
        return false; // failed: the error record says why, and comm.synchronize() throws it
      block.sync();
    }
    return true;
  }
  /// What comm.launch calls on every worker.
  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    return run(ctx.g, ctx.worker, ctx.workers);
  }
};
// readme:end

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t n = 8192;
  const int steps = 100;
  P::memory buffer = P::allocate(n * sizeof(float), device); // before the communicator (example 00)
  auto* grad = reinterpret_cast<float*>(buffer.ptr);
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    const training_loop loop{comm.device_handle(), grad, n, steps};
    comm.launch(loop, 4); // 4 workers (thread blocks), at most team_config.workers
    comm.synchronize();   // throws what a failed call recorded
  }
  std::vector<float> out(n);
  P::copy(out.data(), grad, n * sizeof(float));
  P::release(buffer);
  const float want = static_cast<float>(world * (world - 1) / 2 + world * (steps - 1));
  return std::all_of(out.begin(), out.end(), [&](float v) { return v == want; });
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("persistent: skipped: no GPU visible"), 0;
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
  std::printf("%s: 100 compute + all-reduce steps in one persistent launch over %d ranks: %s\n", P::name,
              world, all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
