// examples/03_custom_collective.cu: collectives ark does not ship, built from its primitives.
// all_to_all uses channel steps (send / open_recv / pass / close_recv), the layer ark's own
// algorithms use; token_ring uses raw put / signal / wait on a registered buffer. Each is a
// trivially copyable functor that comm.launch runs on every worker of every rank, over the DMA
// backend it names (a kernel of your own calls it with a context from device_comm::make_context).
//
//   nvcc  -std=c++20 -arch=native -I ark/include 03_custom_collective.cu -o custom
//   hipcc -std=c++20 -x hip       -I ark/include 03_custom_collective.cu -o custom
//   g++   -std=c++20 -x c++       -I ark/include 03_custom_collective.cu -o custom -pthread
//   ./custom [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

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

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t block = 1000, n = block * world;
  std::vector<std::int32_t> in(n), out(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int32_t>(rank * 1000000 + i);
  // device memory before the communicator, freed after its end (example 00)
  P::memory src = P::allocate(n * sizeof(std::int32_t), device);
  P::memory dst = P::allocate(n * sizeof(std::int32_t), device);
  P::memory mailbox = P::allocate(4 * sizeof(std::uint64_t), device);
  P::copy(src.ptr, in.data(), n * sizeof(std::int32_t));
  bool ok = true;
  auto check = [&] {
    P::copy(out.data(), dst.ptr, n * sizeof(std::int32_t));
    for (int q = 0; q < world; ++q)
      for (std::size_t i = 0; i < block; ++i)
        ok = ok && out[q * block + i] == static_cast<std::int32_t>(q * 1000000 + rank * block + i);
  };
  std::uint64_t total = 0;
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    // the same functor over two backends: LL packets on 2 workers, thread copies on 3
    const all_to_all<std::int32_t> a2a{reinterpret_cast<const std::int32_t*>(src.ptr),
                                       reinterpret_cast<std::int32_t*>(dst.ptr), block};
    comm.launch<ark::dma::ll_packet<2>>(a2a, 2);
    comm.synchronize(); // throws what a failed call recorded
    check();
    P::zero(dst.ptr, n * sizeof(std::int32_t));
    comm.launch<ark::dma::thread_copy<2>>(a2a, 3);
    comm.synchronize();
    check();

    // the token ring runs in a window of 4 words a rank that every rank registered (until the
    // communicator's end)
    const ark::window_view& win = comm.register_buffer(mailbox.ptr, 4 * sizeof(std::uint64_t));
    comm.launch<ark::dma::thread_copy<1>>(token_ring{win}, 1);
    comm.synchronize();
    P::copy(&total, mailbox.ptr, sizeof total);
  }
  ok = ok && total == static_cast<std::uint64_t>(world) * (world - 1) / 2;
  for (P::memory* m : {&src, &dst, &mailbox}) P::release(*m);
  return ok;
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("custom: skipped: no GPU visible"), 0;
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
  std::printf("%s: custom all-to-all (two backends) and token ring over %d ranks: %s\n", P::name, world,
              all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
