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
// and accumulates every step's output; the host checks it against a reference. comm.launch runs
// the loop as one kernel of the communicator's, on one block (collective worker 0 and
// point-to-point worker 0, team_config::p2p_workers); on the host platform, on its CPU threads.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 07_moe_dispatch.cu -o moe
//   hipcc -std=c++20 -x hip       -I ark/include 07_moe_dispatch.cu -o moe
//   g++   -std=c++20 -x c++       -I ark/include 07_moe_dispatch.cu -o moe -pthread
//   ./moe [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

/// The expert token t of `rank` picks at step s (every rank computes the same for its own tokens).
ARK_HD inline int expert_of(int rank, std::size_t t, int s, int world) {
  return static_cast<int>((static_cast<std::uint64_t>(rank) * 7919u + t * 104729u + s * 31u) % 1009u) % world;
}
ARK_HD inline float token_value(int rank, std::size_t t, std::size_t d, int s) {
  return static_cast<float>((rank * 3 + static_cast<int>(t) * 5 + static_cast<int>(d) + s) % 17);
}

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

  template <class Block>
  ARK_HD bool run(Block& block) const {
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
  /// What comm.launch calls on every worker (here one).
  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    return run(ctx.g);
  }
};

/// A buffer of n T in P's memory (device memory on GPUs), released with the rank.
template <class T>
struct buffer {
  P::memory mem;
  buffer(std::size_t n, int device) : mem(P::allocate(n * sizeof(T), device)) {}
  ~buffer() { P::release(mem); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  T* get() const { return reinterpret_cast<T*>(mem.ptr); }
};

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int steps = 20;
  const std::size_t tokens = 256, dim = 64;
  const int d = rank % P::device_count();
  // before the communicator, so freed after its end (example 00)
  buffer<float> packed(tokens * dim, d), received(world * tokens * dim, d), combined(tokens * dim, d),
      acc(tokens * dim, d); // allocated zeroed
  buffer<std::int64_t> send_n(world, d), recv_n(world, d);
  buffer<std::uint32_t> order(tokens, d);
  buffer<ark::p2p_ops> ops(1, d);
  ark::communicator<P>::config cfg;
  cfg.device = d;
  ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
  const moe_loop loop{comm.device_handle(), tokens,         dim,       steps,        packed.get(),
                      received.get(),       combined.get(), acc.get(), send_n.get(), recv_n.get(),
                      order.get(),          ops.get()};
  comm.launch(loop, 1);
  comm.synchronize(); // throws what a failed call recorded

  std::vector<float> got(tokens * dim);
  P::copy(got.data(), acc.get(), got.size() * sizeof(float));
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t e = 0; e < dim; ++e) {
      float want = 0;
      for (int s = 0; s < steps; ++s)
        want += token_value(rank, t, e, s) * static_cast<float>(expert_of(rank, t, s, world) + 1);
      if (got[t * dim + e] != want) return false;
    }
  return true;
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("moe: skipped: no GPU visible"), 0;
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
  std::printf("%s: 20 MoE steps (route, count exchange, dispatch, expert, combine) in one persistent launch "
              "over %d ranks: %s\n",
              P::name, world, all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
