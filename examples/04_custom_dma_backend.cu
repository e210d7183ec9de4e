// examples/04_custom_dma_backend.cu: a DMA backend of your own.
// A backend is a stateless type with static, scope-collective functions (see
// ark/concepts/dma_backend.hpp). This one moves payload in 8-byte units (for links where wide
// stores are a poor fit) and reuses ark's pieces: raw transfers done by threads, and the "simple"
// channel protocol (slots, headers, head and ack flags). Only `vec_bytes` and `id` are new.
#include "run_ranks.hpp"

template <unsigned Depth>
struct narrow_copy : ark::dma::thread_transfers<Depth>, ark::dma::simple_channel<narrow_copy<Depth>> {
  static constexpr std::uint8_t id = 200;     // ranks compare it: all must use the same backend
  static constexpr bool ll = false;           // payload in slots, announced by a flag
  static constexpr std::size_t vec_bytes = 8; // passes load and store 8-byte vectors
};
static_assert(ark::dma_backend<narrow_copy<2>>, "narrow_copy must model ark::dma_backend");

struct custom_backend {
  template <class P>
  int operator()(int world) const {
    const int rc = examples::run_ranks<P>(world, [world](ark::communicator<P>& comm, int rank) {
      const std::size_t n = 100001;
      examples::buffer<P, double> data(n, rank);
      data.upload(std::vector<double>(n, 0.5 * rank));
      comm.template all_reduce<ark::algo::ring, narrow_copy<2>>(data.data(), data.data(), n, ark::op::max{});
      comm.synchronize();
      for (double v : data.download())
        if (v != 0.5 * (world - 1)) return false;
      return true;
    });
    std::printf("%s: ring all-reduce (max) over the narrow_copy backend, %d ranks: %s\n", P::name, world,
                rc ? "WRONG" : "correct");
    return rc;
  }
};

int main() { return examples::on_every_gpu_or_host(custom_backend{}); }
