// examples/03_custom_collective.cu: a collective ark does not ship, built from its primitives.
// all_to_all uses channel steps (send / open_recv / pass / close_recv), the layer ark's own
// algorithms use; token_ring uses raw put / signal / wait on a registered buffer. Both are in
// custom_collectives.hpp; comm.launch runs them on every worker of every rank.
#include "custom_collectives.hpp"
#include "run_ranks.hpp"

struct custom {
  template <class P>
  int operator()(int world) const {
    const int rc = examples::run_ranks<P>(world, [world](ark::communicator<P>& comm, int rank) {
      const std::size_t block = 1000;
      std::vector<std::int32_t> in(block * world);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int32_t>(rank * 1000000 + i);
      examples::buffer<P, std::int32_t> src(block * world, rank), dst(block * world, rank);
      src.upload(in);
      comm.template launch<ark::dma::ll_packet<2>>(
          examples::all_to_all<std::int32_t>{src.data(), dst.data(), block}, 2);
      comm.synchronize();
      const auto out = dst.download();
      for (int q = 0; q < world; ++q)
        for (std::size_t i = 0; i < block; ++i)
          if (out[q * block + i] != static_cast<std::int32_t>(q * 1000000 + rank * block + i)) return false;

      examples::buffer<P, std::uint64_t> mailbox(4, rank);
      const ark::window_view& win = comm.register_buffer(mailbox.data(), 4 * sizeof(std::uint64_t));
      comm.template launch<ark::dma::thread_copy<1>>(examples::token_ring{win}, 1);
      comm.synchronize();
      return mailbox.download()[0] == static_cast<std::uint64_t>(world * (world - 1) / 2);
    });
    std::printf("%s: custom all-to-all and token ring over %d ranks: %s\n", P::name, world,
                rc ? "WRONG" : "correct");
    return rc;
  }
};

int main() { return examples::on_every_gpu_or_host(custom{}); }
