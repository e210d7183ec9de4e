// examples/06_colocation.cu: collectives that share the GPU with compute. A compute kernel runs on
// its own stream while gradients are all-reduced beside it through dma::copy_engine: the copy
// engine moves every byte straight into the peers' registered buffer and one short reduction
// kernel of at most `max_ctas` blocks reduces; an all-gather with max_ctas = 0 runs no kernel
// that moves bytes (one warp waits for the peers' flags). plan() reports what each call will
// occupy before it runs.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 06_colocation.cu -o colocation
//   hipcc -std=c++20 -x hip       -I ark/include 06_colocation.cu -o colocation
//   g++   -std=c++20 -x c++       -I ark/include 06_colocation.cu -o colocation -pthread
//   ./colocation [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

/// Stand-in for the model's compute: x = x * a + b, repeated, over a buffer.
struct compute_work {
  float* x;
  std::size_t n;
  int reps;
  template <class Block>
  ARK_HD void operator()(Block& g, unsigned worker, unsigned workers) const {
    for (std::size_t i = worker * std::size_t(g.size()) + g.thread_rank(); i < n;
         i += std::size_t(workers) * g.size())
      for (int r = 0; r < reps; ++r) x[i] = x[i] * 0.5f + 1.0f;
  }
};

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t n = P::synchronous_launch ? (1u << 16) : (16u << 20); // gradient floats
  // device memory, the compute stream and the compute kernel's first launch (which loads it) before
  // the communicator: where ranks share a GPU, each can wait for the kernels running on it, a
  // peer's collective too (docs/guide.md, "Ranks that share a GPU")
  P::memory grad_mem = P::allocate(n * sizeof(float), device);
  P::memory work_mem = P::allocate(n * sizeof(float), device);
  P::memory gathered_mem = P::allocate(n * world * sizeof(float), device);
  auto* grad = reinterpret_cast<float*>(grad_mem.ptr);
  auto* gathered = reinterpret_cast<float*>(gathered_mem.ptr);
  const std::vector<float> mine(n, static_cast<float>(rank + 1));
  P::copy(grad, mine.data(), n * sizeof(float));
  P::stream compute = P::create_stream(device);
  const ark::launch_shape shape{P::synchronous_launch ? 4u : 128u, P::synchronous_launch ? 1u : 256u};
  const compute_work work{reinterpret_cast<float*>(work_mem.ptr), n, 64};
  P::launch(compute, shape, compute_work{work.x, n, 0});
  P::synchronize(compute);
  ark::call_plan p;
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    comm.register_buffer(grad, n * sizeof(float)); // peers write into these (until the end)
    comm.register_buffer(gathered, n * world * sizeof(float));
    // readme:begin colocation
    ark::call_options<P> o;
    o.max_ctas = 8; // the reduction's SM budget
    p = comm.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::copy_engine, float>(n, o);
    P::launch(compute, shape, work); // the model's compute, on its own stream
    comm.all_reduce<ark::algo::automatic, ark::dma::copy_engine>(grad, grad, n, ark::op::sum{}, o);
    o.max_ctas = 0; // all-gather of each rank's n gradients: the copy engine alone moves them
    comm.all_gather(grad, gathered, n, o);
    comm.synchronize();
    P::synchronize(compute);
    // readme:end
  }
  P::destroy_stream(compute);

  const float want = static_cast<float>(world * (world + 1) / 2);
  std::vector<float> out(n * world);
  P::copy(out.data(), gathered, n * world * sizeof(float));
  const bool ok = std::all_of(out.begin(), out.end(), [&](float v) { return v == want; });
  if (rank == 0)
    std::printf("%s, %d ranks: all-reduce of %zu KB on the copy engine beside a compute kernel (reduction on "
                "%u blocks, %zu KB scratch), then an all-gather on the copy engine alone\n",
                P::name, world, n * 4 >> 10, p.ctas, p.scratch_bytes >> 10);
  for (P::memory* m : {&grad_mem, &work_mem, &gathered_mem}) P::release(*m);
  return ok;
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("colocation: skipped: no GPU visible"), 0;
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
  std::printf("%s: co-located all-reduce and all-gather over %d ranks: %s\n", P::name, world,
              all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
