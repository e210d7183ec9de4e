// examples/06_colocation.cu: collectives that share the GPU with compute.
// A compute kernel runs on its own stream while gradients are all-reduced beside it through
// dma::copy_engine: the copy engine moves every byte straight into the peers' registered buffer
// and one short reduction kernel of at most `max_ctas` blocks reduces; an all-gather with
// max_ctas = 0 runs no kernel that moves bytes (one warp waits for the peers' flags). plan()
// reports what each call will occupy before it runs.
#include "run_ranks.hpp"

#include <vector>

/// Stand-in for the model's compute: x = x * a + b, repeated, over a buffer.
struct compute_work {
  float* x;
  std::size_t n;
  int reps;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    for (std::size_t i = worker * std::size_t(g.size()) + g.thread_rank(); i < n;
         i += std::size_t(workers) * g.size())
      for (int r = 0; r < reps; ++r) x[i] = x[i] * 0.5f + 1.0f;
  }
};

struct colocation {
  template <class P>
  int operator()(int world) const {
    const std::size_t n = P::synchronous_launch ? (1u << 16) : (16u << 20); // gradient floats
    return examples::run_ranks<P>(world, [&](ark::communicator<P>& comm, int rank) {
      examples::buffer<P, float> grad(n, rank), work(n, rank), gathered(n * world, rank);
      comm.register_buffer(grad.data(), n * sizeof(float)); // peers write into these
      comm.register_buffer(gathered.data(), n * world * sizeof(float));
      grad.upload(std::vector<float>(n, static_cast<float>(rank + 1)));
      work.upload(std::vector<float>(n, 0.0f));

      typename P::stream compute = P::create_stream(rank);
      ark::call_options<P> o;
      o.max_ctas = 8; // the reduction's SM budget
      const ark::call_plan p =
          comm.template plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::copy_engine, float>(
              n, o);
      P::launch(compute,
                ark::launch_shape{P::synchronous_launch ? 4u : 128u, P::synchronous_launch ? 1u : 256u},
                compute_work{work.data(), n, 64});
      comm.template all_reduce<ark::algo::automatic, ark::dma::copy_engine>(grad.data(), grad.data(), n,
                                                                            ark::op::sum{}, o);
      o.max_ctas = 0; // all-gather of each rank's first n elements: the copy engine alone moves them
      comm.all_gather(grad.data(), gathered.data(), n, o);
      comm.synchronize();
      P::synchronize(compute);
      P::destroy_stream(compute);

      const float want = static_cast<float>(world * (world + 1) / 2);
      std::size_t bad = 0;
      for (float v : grad.download()) bad += v != want;
      for (float v : gathered.download()) bad += v != want;
      if (rank == 0)
        std::printf(
            "%s, %d ranks: all-reduce of %zu KB on the copy engine beside a compute kernel "
            "(reduction on %u blocks, %zu KB scratch), then an all-gather on the copy engine alone: %s\n",
            P::name, world, n * 4 >> 10, p.ctas, p.scratch_bytes >> 10, bad ? "WRONG" : "correct");
      return bad == 0;
    });
  }
};

int main() { return examples::on_every_gpu_or_host(colocation{}); }
