// examples/00_hello_all_reduce.cu: the smallest complete ark program.
// An all-reduce (sum) over every GPU of this machine, one host thread per GPU; with no GPU, over
// 4 ranks of the host platform. Build: see examples/meson.build; run: build/examples/00_hello_all_reduce
#include "run_ranks.hpp"

struct hello {
  template <class P>
  int operator()(int world) const {
    const int rc = examples::run_ranks<P>(world, [world](ark::communicator<P>& comm, int rank) {
      const std::size_t n = 1 << 20;
      examples::buffer<P, float> data(n, rank);
      data.upload(std::vector<float>(n, static_cast<float>(rank + 1)));

      comm.all_reduce(data.data(), data.data(), n); // in place; algorithm chosen from size and world
      comm.synchronize();                           // waits for the stream; throws if the call failed

      const float want = world * (world + 1) / 2.0f;
      for (float v : data.download())
        if (v != want) return false;
      return true;
    });
    std::printf("%s: all-reduce of 1 Mi floats over %d ranks: %s\n", P::name, world,
                rc ? "WRONG" : "correct");
    return rc;
  }
};

int main() { return examples::on_every_gpu_or_host(hello{}); }
