// examples/07_moe_dispatch.cu: mixture-of-experts token routing from inside your own kernel.
// Every rank holds `tokens` tokens of `dim` floats and one expert (expert e lives on rank e). A
// persistent kernel loops, with no CPU on the path:
//   route     each token picks an expert; the tokens are packed by expert
//   counts    an all-to-all of the per-expert counts (one element per rank), so that every rank
//             knows how much it receives from each
//   dispatch  each rank's tokens go to their experts: all_to_allv as one group of sends and
//             receives (device_comm::p2p), whatever order it lists them in
//   expert    expert e scales its tokens by e + 1
//   combine   the results go back to where the tokens came from (the reverse group)
// and accumulates every step's output; the host checks it against a reference.
// With no GPU, the same loop body runs on the host platform through comm.launch.
#include "run_ranks.hpp"

#include <cstdint>

/// The expert token t of `rank` picks at step s (every rank computes the same for its own tokens).
ARK_HD inline int expert_of(int rank, std::size_t t, int s, int world) {
  return static_cast<int>((static_cast<std::uint64_t>(rank) * 7919u + t * 104729u + s * 31u) % 1009u) % world;
}
ARK_HD inline float token_value(int rank, std::size_t t, std::size_t d, int s) {
  return static_cast<float>((rank * 3 + static_cast<int>(t) * 5 + static_cast<int>(d) + s) % 17);
}

template <class P>
struct moe_loop {
  ark::device_comm<P> comm;
  std::size_t tokens, dim;
  int steps;
  float* packed;        // tokens x dim: this rank's tokens, by expert
  float* received;      // world x tokens x dim at most: the tokens this rank's expert serves
  float* combined;      // tokens x dim: the results, by expert (packed's order)
  float* acc;           // tokens x dim: the results in token order, summed over the steps
  std::int64_t* send_n; // world: floats sent to each rank
  std::int64_t* recv_n; // world: floats received from each rank
  std::uint32_t* order; // tokens: the token at each packed position
  ark::p2p_ops* group;  // one exchange's sends and receives: in memory, not in each thread's
                        // registers (2 KB a thread would live in local memory)

  template <class G>
  ARK_HD bool run(G& block) const {
    const int me = comm.rank(), world = comm.world();
    const unsigned t0 = block.thread_rank(), nt = block.size();
    for (int s = 0; s < steps; ++s) {
      // route: thread 0 packs the tokens by expert (a real layer would sort on the GPU)
      if (t0 == 0) {
        std::size_t at = 0;
        for (int e = 0; e < world; ++e) {
          send_n[e] = 0;
          for (std::size_t t = 0; t < tokens; ++t)
            if (expert_of(me, t, s, world) == e)
              order[at++] = static_cast<std::uint32_t>(t), send_n[e] += dim;
        }
      }
      block.sync();
      for (std::size_t i = t0; i < tokens * dim; i += nt)
        packed[i] = token_value(me, order[i / dim], i % dim, s);
      block.sync();
      // counts: block p of send_n (one element) to rank p
      if (!comm.all_to_all(block, 0, 1, send_n, recv_n, 1)) return false;
      // dispatch, and combine: a group each, with every peer (its own block copied locally)
      auto exchange = [&](const float* from, const std::int64_t* out_n, float* to, const std::int64_t* in_n) {
        if (t0 == 0) { // thread 0 lists the group; every thread runs it
          ark::p2p_ops& ops = *group;
          ops.n = 0;
          std::size_t so = 0, ro = 0;
          for (int p = 0; p < world; ++p) {
            const auto sn = static_cast<std::size_t>(out_n[p]), rn = static_cast<std::size_t>(in_n[p]);
            if (p == me) { // our own tokens: a local copy
              ark::p2p_op o = ark::make_p2p_op(ark::p2p_op::self, to + ro, rn, p);
              o.src = reinterpret_cast<std::uint64_t>(from + so);
              ops.op[ops.n++] = o;
            } else {
              ops.op[ops.n++] = ark::make_p2p_op(ark::p2p_op::send, from + so, sn, p);
              ops.op[ops.n++] = ark::make_p2p_op(ark::p2p_op::recv, to + ro, rn, p);
            }
            so += sn, ro += rn;
          }
        }
        block.sync();
        return comm.p2p(block, 0, 1, *group);
      };
      if (!exchange(packed, send_n, received, recv_n)) return false;
      // expert: this rank's expert scales what it received
      std::size_t got = 0;
      for (int p = 0; p < world; ++p) got += static_cast<std::size_t>(recv_n[p]);
      for (std::size_t i = t0; i < got; i += nt) received[i] *= static_cast<float>(me + 1);
      block.sync();
      if (!exchange(received, recv_n, combined, send_n)) return false;
      // combine: back into token order
      for (std::size_t i = t0; i < tokens * dim; i += nt) acc[order[i / dim] * dim + i % dim] += combined[i];
      block.sync();
    }
    return true;
  }
  /// For comm.launch on the host platform.
  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    return run(ctx.g);
  }
};

#if defined(ARK_GPU_COMPILER)
template <class P>
__global__ void __launch_bounds__(512, 1) moe_kernel(const moe_loop<P> loop) {
  ark::block_scope block;
  loop.run(block);
}
#endif

struct moe {
  template <class P>
  int operator()(int world) const {
    const int steps = 20;
    const std::size_t tokens = 256, dim = 64;
    const int rc = examples::run_ranks<P>(world, [&](ark::communicator<P>& comm, int rank) {
      examples::buffer<P, float> packed(tokens * dim, rank), received(world * tokens * dim, rank),
          combined(tokens * dim, rank), acc(tokens * dim, rank);
      examples::buffer<P, std::int64_t> send_n(world, rank), recv_n(world, rank);
      examples::buffer<P, std::uint32_t> order(tokens, rank);
      examples::buffer<P, ark::p2p_ops> group(1, rank);
      acc.upload(std::vector<float>(tokens * dim, 0.0f));
      const moe_loop<P> loop{comm.device_handle(), tokens,          dim,        steps,         packed.data(),
                             received.data(),      combined.data(), acc.data(), send_n.data(), recv_n.data(),
                             order.data(),         group.data()};
      if constexpr (P::synchronous_launch) {
        comm.launch(loop, 1);
      } else {
#if defined(ARK_GPU_COMPILER)
        // one block: collective worker 0 and point-to-point worker 0 (team_config::p2p_workers)
        moe_kernel<P><<<1, 512, 0, comm.stream()>>>(loop);
        P::check_launch("launch the MoE kernel");
#endif
      }
      comm.synchronize(); // throws what a failed call recorded
      const std::vector<float> got = acc.download();
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t d = 0; d < dim; ++d) {
          float want = 0;
          for (int s = 0; s < steps; ++s)
            want += token_value(rank, t, d, s) * static_cast<float>(expert_of(rank, t, s, world) + 1);
          if (got[t * dim + d] != want) return false;
        }
      return true;
    });
    std::printf(
        "%s: %d MoE steps (route, count exchange, dispatch, expert, combine) in one persistent launch "
        "over %d ranks: %s\n",
        P::name, steps, world, rc ? "WRONG" : "correct");
    return rc;
  }
};

int main() { return examples::on_every_gpu_or_host(moe{}); }
