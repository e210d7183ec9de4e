// examples/custom_collectives.hpp: collectives built from ark's public primitives, shared by
// examples 02 and 03 and by the tests (tests/collectives/test_communicator.cpp). Each is a
// trivially copyable functor a communicator launches on every worker of every rank:
//
//   comm.launch<ark::dma::ll_packet<2>>(examples::all_to_all<float>{in, out, block}, workers);
//
// or that a GPU kernel calls with a context from device_comm::make_context.
#pragma once

#include "ark/ark.hpp"

namespace examples {

/// All-to-all: block p of every rank's `in` lands as block (sender) of rank p's `out`.
/// Built from channel steps (send, open_recv, pass, close_recv), like ark's own algorithms.
template <class T>
struct all_to_all {
  const T* in;
  T* out;
  std::size_t block; // elements per block

  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    using B = typename Ctx::backend;
    namespace alg = ark::algorithms;
    const int me = ctx.rank();
    // this worker's share of a block, cut into slot-sized pieces: one pipeline step each; sends
    // run Depth steps ahead of receives
    return alg::pipeline_pieces<T>(
        ctx, block,
        [&](std::size_t off, std::size_t n, std::uint64_t step) {
          for (int p = 0; p < ctx.world(); ++p)
            if (p != me && !B::send(ctx, ark::dma::peers::only(p), step, in + p * block + off, n * sizeof(T)))
              return false;
          return true;
        },
        [&](std::size_t off, std::size_t n, std::uint64_t step) {
          if (!B::open_recv(ctx, ark::dma::peers::all(), step)) return false;
          // our own block is a local copy; block q arrives from rank q
          if (!alg::pass<T>(ctx, n, alg::in_local<T>{in + me * block + off},
                            alg::out_local<T>{out + me * block + off}, ark::op::sum{}, false))
            return false;
          for (int q = 0; q < ctx.world(); ++q)
            if (q != me && !alg::pass<T>(ctx, n, alg::in_peer{q, step},
                                         alg::out_local<T>{out + q * block + off}, ark::op::sum{}, false))
              return false;
          B::close_recv(ctx, ark::dma::peers::all(), step);
          return true;
        });
  }
};

/// A token goes around the ring, each rank adding its rank, then rank 0 hands the total to all.
/// Built from raw put / signal / wait on a registered window of 4 words per rank:
/// [0] the value, [1] the flag, [2] local staging.
struct token_ring {
  ark::window_view win;

  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    using B = typename Ctx::backend;
    using P = typename Ctx::platform;
    const int me = ctx.rank(), n = ctx.world(), next = (me + 1) % n;
    auto word = [&](int rank, int i) { return reinterpret_cast<std::uint64_t*>(win.base[rank]) + i; };
    if (n == 1) return true;
    std::uint64_t token = 0;
    if (me != 0) { // wait for the token from the previous rank
      if (!B::wait(ctx, word(me, 1), 1, ark::wait_kind::flag, me - 1)) return false;
      token = P::load_relaxed(word(me, 0));
    }
    if (ctx.g.thread_rank() == 0) *word(me, 2) = token + static_cast<std::uint64_t>(me);
    ctx.g.sync();
    if (!B::put(ctx, word(next, 0), word(me, 2), 8)) return false;
    B::signal(ctx, word(next, 1), 1);
    if (me == 0) { // the total came back: hand it to everyone
      if (!B::wait(ctx, word(0, 1), 1, ark::wait_kind::flag, n - 1)) return false;
      for (int p = 1; p < n; ++p) {
        if (!B::put(ctx, word(p, 0), word(0, 0), 8)) return false;
        B::signal(ctx, word(p, 1), 2);
      }
      return B::flush(ctx);
    }
    return B::wait(ctx, word(me, 1), 2, ark::wait_kind::flag, 0) && B::flush(ctx);
  }
};

/// A persistent loop: every worker repeatedly computes on its share of `data` and all-reduces it
/// through the device handle; no host involvement between iterations.
template <class B, class Comm>
struct persistent_loop {
  Comm comm;
  std::int64_t* data;
  std::size_t n;
  int iterations;
  int rank;

  static constexpr std::int64_t modulus = 1000003;

  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    const ark::elem_range mine = ctx.template partition<std::int64_t>(n);
    for (std::size_t i = mine.begin + ctx.g.thread_rank(); i < mine.end(); i += ctx.g.size())
      data[i] = static_cast<std::int64_t>(i);
    for (int k = 0; k < iterations; ++k) {
      // "compute": every worker updates only its own share, the share its all-reduce covers
      for (std::size_t i = mine.begin + ctx.g.thread_rank(); i < mine.end(); i += ctx.g.size())
        data[i] = (data[i] * 3 + rank + k) % modulus;
      ctx.g.sync();
      if (!comm.template all_reduce<ark::algo::one_shot, B>(ctx.g, ctx.worker, ctx.workers, data, data, n))
        return false;
      ctx.g.sync();
    }
    return true;
  }
};

/// What persistent_loop leaves in element i.
inline std::int64_t persistent_loop_expected(std::size_t i, int iterations, int world) {
  std::int64_t x = static_cast<std::int64_t>(i);
  for (int k = 0; k < iterations; ++k) {
    std::int64_t sum = 0;
    for (int r = 0; r < world; ++r) sum += (x * 3 + r + k) % 1000003;
    x = sum;
  }
  return x;
}

} // namespace examples
