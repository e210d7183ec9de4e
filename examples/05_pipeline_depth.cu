// examples/05_pipeline_depth.cu: the pipeline depth is a template parameter.
// Depth is how many pipeline steps a sender may run ahead of its receiver: with depth 1 every
// slot-sized piece waits for the previous one to be acknowledged; deeper pipelines overlap the
// transfer of one piece with the reduction of the previous. Times a ring all-reduce per depth.
#include "run_ranks.hpp"

#include <chrono>

template <unsigned Depth, class P>
double time_ring(ark::communicator<P>& comm, float* data, std::size_t n) {
  using backend = ark::dma::thread_copy<Depth>;
  comm.template all_reduce<ark::algo::ring, backend>(data, data, n); // warm up
  comm.synchronize();
  const int iters = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm.template all_reduce<ark::algo::ring, backend>(data, data, n);
  comm.synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

struct depths {
  template <class P>
  int operator()(int world) const {
    const std::size_t n = P::synchronous_launch ? (2u << 20) : (64u << 20); // floats
    typename ark::communicator<P>::config cfg;
    cfg.team.max_depth = 8; // slots for the deepest pipeline timed here
    return examples::run_ranks<P>(
        world,
        [&](ark::communicator<P>& comm, int rank) {
          examples::buffer<P, float> data(n, rank);
          const double us[] = {time_ring<1>(comm, data.data(), n), time_ring<2>(comm, data.data(), n),
                               time_ring<4>(comm, data.data(), n), time_ring<8>(comm, data.data(), n)};
          if (rank == 0)
            std::printf(
                "%s, %d ranks, ring all-reduce of %zu MB: depth 1 %.0f us, 2 %.0f us, 4 %.0f us, 8 %.0f us\n",
                P::name, world, n * 4 >> 20, us[0], us[1], us[2], us[3]);
          return true;
        },
        cfg);
  }
};

int main() { return examples::on_every_gpu_or_host(depths{}); }
