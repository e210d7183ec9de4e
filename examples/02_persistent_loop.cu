// examples/02_persistent_loop.cu: collectives called from inside your own kernel.
// A persistent kernel loops "compute gradients, all-reduce them" with no CPU on the path: each
// thread block is a worker that all-reduces its own share through the device handle.
// With no GPU, the same loop body runs on the host platform through comm.launch.
#include "run_ranks.hpp"

/// One training step per iteration. Every block touches only its own share of `grad`: the share
/// its all-reduce covers, so no grid-wide barrier is needed between the steps.
template <class P>
struct training_loop {
  ark::device_comm<P> comm; // trivially copyable: passed to the kernel by value
  float* grad;
  std::size_t n;
  int steps;

  template <class G>
  ARK_HD bool run(G& block, unsigned worker, unsigned workers) const {
    const ark::elem_range mine = ark::split({0, n}, workers, worker, ark::align_elems<float>);
    for (int s = 0; s < steps; ++s) {
      for (std::size_t i = mine.begin + block.thread_rank(); i < mine.end(); i += block.size())
        grad[i] = static_cast<float>(comm.rank() + s); // "compute"
      block.sync();
      // ark::algo::one_step is faster per call where each block's share fits one LL step
      // (threads x 8 bytes: not the 8 KB a block here, nor the host platform's one thread a worker),
      // and ark::algo::one_step_world<N> faster again in a kernel compiled for a team of N ranks
      if (!comm.template all_reduce<ark::algo::one_shot, ark::dma::ll_packet<4>>(block, worker, workers, grad,
                                                                                 grad, n))
        return false; // the failure is recorded; the host sees it in comm.synchronize()
      block.sync();
    }
    return true;
  }
  /// For comm.launch on the host platform.
  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    return run(ctx.g, ctx.worker, ctx.workers);
  }
};

#if defined(ARK_GPU_COMPILER)
/// Your kernel: here it only loops, in real code it would also run the model. The bound (512
/// threads, one block an SM) keeps ptxas within the 128 registers a thread that a 512-thread block
/// may use: the collective code alone takes up to about 125, and your own code adds to it.
template <class P>
__global__ void __launch_bounds__(512, 1) persistent_kernel(const training_loop<P> loop) {
  ark::block_scope block;
  loop.run(block, blockIdx.x, gridDim.x);
}
#endif

struct persistent {
  template <class P>
  int operator()(int world) const {
    const int steps = 100;
    const int rc = examples::run_ranks<P>(world, [&](ark::communicator<P>& comm, int rank) {
      const std::size_t n = 8192;
      const unsigned blocks = 4; // at most team_config.workers
      examples::buffer<P, float> grad(n, rank);
      const training_loop<P> loop{comm.device_handle(), grad.data(), n, steps};
      if constexpr (P::synchronous_launch) {
        comm.launch(loop, blocks);
      } else {
#if defined(ARK_GPU_COMPILER)
        // on the communicator's stream: the kernel is one call of it, run after its other calls
        persistent_kernel<P><<<blocks, 512, 0, comm.stream()>>>(loop);
        P::check_launch("launch the persistent kernel");
        comm.synchronize(); // throws what a failed call recorded
#endif
      }
      const float want = static_cast<float>(world * (world - 1) / 2 + world * (steps - 1));
      for (float v : grad.download())
        if (v != want) return false;
      return true;
    });
    std::printf("%s: %d compute + all-reduce steps in one persistent launch over %d ranks: %s\n", P::name,
                steps, world, rc ? "WRONG" : "correct");
    return rc;
  }
};

int main() { return examples::on_every_gpu_or_host(persistent{}); }
