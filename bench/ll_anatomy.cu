// bench/ll_anatomy.cu: where the time of a small LL all-reduce goes, inside a persistent kernel.
//
// Two ranks, one process: on two GPUs, or both on one GPU when there is only one (then no
// link is crossed: what remains is the software path, for comparing variants). Each variant is
// a persistent kernel running N all-reduces (float sum) of one size over ark's LL slots, and
// adds one piece of the protocol to the previous one:
//   packets  each thread stores its packet into the peer's slot and polls its own: nothing else
//            (the shape of shared/probes/ll_one_shot.cu, over ark's layout and LL code; the
//            packets carry the call's tag, which is how a receiver checks the call)
//   barrier  + the block barrier that ends each receive
//   hwrite   + the call-description header written (two packets, by the lane of the peer's rank;
//            read only to name a mismatch)
//   implied  + the acknowledgement after the receive (what a call whose credits are implied by
//            the previous call's packets does: context::exchanged)
//   credit   + the credit wait before the stores (open_send: a flag load and a barrier)
//   lean     the real call's latency path (all_reduce_one_shot_ll, as instantiated for two ranks)
//            on a context made per call:
//            adds the worker's round, loaded and stored in memory, the credits implied after the
//            first call, and the closing barrier
//   verdict  lean, its closing barrier left to the verdict barrier after it (device_comm::run's)
//   part     verdict, with the worker's share and the choice of path computed in the loop (they
//            are loop-invariant here: the compiler may hoist them)
//   share    the public algorithm (all_reduce_one_shot): part, with the pipelined path for shares
//            that do not fit one step compiled beside it, never taken here
//   full     the real call, comm.all_reduce<one_shot, ll_packet<2>> (adds device_comm's checks,
//            the call description and the share computed per call)
//   step     the real call with algo::one_step, comm.all_reduce<one_step, ll_packet<2>>: full
//            without the pipelined path compiled beside the latency path (which that path's mere
//            presence slowed), and with the loops over peers unrolled for two ranks
//   step2    the real call with algo::one_step_world<2>: step without the path for other team
//            sizes compiled beside the two-rank one
// Each variant runs twice: in-kernel (one persistent kernel runs ITERS calls) and launched (each
// call is a kernel of its own, launched early as ark launches its calls: LAUNCHES of them
// captured in a CUDA graph, the graph replayed; what a graph-launched call costs beyond the same
// call inside a running kernel). Launched, `full`, `step` and `step2` are the communicator's host
// calls (comm.all_reduce<one_shot, one_step or one_step_world<2>, ll_packet<2>>(in, out, n), each
// on its own kernel), whose kernel computes what
// it can before it waits for the previous one (platform/gpu.hpp run_workers); the other rows
// are this file's kernels, which wait first. Prints µs per all-reduce for each variant, size and
// mode (the slower rank's), and checks every result.
//
//   build/bench/ll_anatomy [ITERS [LAUNCHES]]
#include "ark/ark.hpp"

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <type_traits>
#include <vector>

using gpu = ark::platform::gpu;
using comm_t = ark::communicator<gpu>;
using B = ark::dma::ll_packet<2>;

enum variant {
  packets,
  barrier,
  hwrite,
  implied,
  credit,
  lean,
  verdict,
  part,
  share,
  full,
  step,
  step2,
  variants
};
const char* const variant_names[] = {"packets", "barrier", "hwrite", "implied", "credit", "lean",
                                     "verdict", "part",    "share",  "full",    "step",   "step2"};

#if defined(ARK_GPU_COMPILER)
struct args {
  ark::device_comm<gpu> comm;
  const float* in;
  float* out;
  std::size_t n;
  int iters;
};

template <int V>
__global__ void __launch_bounds__(512, 1) anatomy(const ARK_GRID_CONSTANT args a) {
#if defined(ARK_DEVICE_PASS)
  ark::detail::gpu::follow_previous_grid(); // launched early: the previous call's kernel ends first
#endif
  const ark::device_comm<gpu>& comm = a.comm;
  const float* const in = a.in;
  float* const out = a.out;
  const std::size_t n = a.n;
  const int iters = a.iters;
  ark::block_scope g;
  const unsigned w = blockIdx.x, nw = gridDim.x;
  if constexpr (V == full || V == step || V == step2) {
    using A =
        std::conditional_t<V == full, ark::algo::one_shot,
                           std::conditional_t<V == step, ark::algo::one_step, ark::algo::one_step_world<2>>>;
    for (int it = 0; it < iters; ++it)
      if (!comm.all_reduce<A, B>(g, w, nw, in, out, n)) return;
  } else {
    using P = gpu;
    const auto d = ark::call_desc::make(ark::collective::all_reduce, ark::algo::one_shot::id,
                                        static_cast<std::uint8_t>(ark::dtype_of<float>),
                                        ark::op_id<ark::op::sum>, B::id, nw, 0, n);
    const auto ctx = comm.make_context<B>(g, w, nw, d);
    const ark::elem_range mine = ctx.partition<float>(n);
    if constexpr (V >= lean) { // the real call's latency path, each row a step closer to full
      namespace alg = ark::algorithms;
      if (V != part && V != share && !alg::detail::one_shot_single_step<float>(ctx, mine))
        return; // then #wrong says so
      for (int it = 0; it < iters; ++it) {
        const auto c = comm.make_context<B>(g, w, nw, d);
        bool ok;
        if constexpr (V == lean) {
          ok = alg::detail::all_reduce_one_shot_ll<alg::ending::barrier, 2>(c, in, out, mine, ark::op::sum{});
        } else if constexpr (V == verdict) { // its closing barrier left to the verdict below
          ok = alg::detail::all_reduce_one_shot_ll<alg::ending::verdict, 2>(c, in, out, mine, ark::op::sum{});
        } else if constexpr (V == part) { // + the share and the choice of path in the loop
          const ark::elem_range m = c.partition<float>(n);
          if (!alg::detail::one_shot_single_step<float>(c, m)) return;
          ok = alg::detail::all_reduce_one_shot_ll<alg::ending::verdict, 2>(c, in, out, m, ark::op::sum{});
        } else { // share: the public algorithm, with the pipelined path beside the latency path
          ok = alg::all_reduce_one_shot<alg::ending::verdict>(c, in, out, n, ark::op::sum{});
        }
        if (V == lean ? !ok : g.sync_any(!ok)) return;
      }
      return;
    }
    const std::size_t bytes = mine.len * sizeof(float), nv = (bytes + 7) / 8, t = g.thread_rank();
    const int rank = comm.rank(), peer = 1 - rank;
    const auto* src = reinterpret_cast<const std::byte*>(in + mine.begin);
    auto* dst = reinterpret_cast<std::byte*>(out + mine.begin);
    for (int it = 0; it < iters; ++it) {
      const std::uint64_t s = ctx.round + static_cast<std::uint64_t>(it);
      ark::vec<8> v{}, r{};
      if (t < nv) v = ark::dma::load_prefix<P, 8>(src + 8 * t, bytes - 8 * t);
      if constexpr (V >= credit) {
        if (!B::open_send(ctx, ark::dma::peers::all(), s)) return;
      } else if constexpr (V >= hwrite) {
        if (static_cast<int>(t) == peer) B::write_header(ctx, peer, s); // no credit
      }
      if (t < nv) B::tx(ctx, peer, s).store(t, v);
      bool ok = true;
      if (t < nv) ok = B::rx(ctx, peer, s).load(ctx, t, r);
      if constexpr (V >= barrier) {
        if (g.sync_any(!ok)) return;
      } else if (!ok) {
        return;
      }
      if (t < nv) {
        const ark::vec<8> mine_first = rank == 0 ? v : r, theirs_second = rank == 0 ? r : v;
        float a[2], b[2], c[2];
        __builtin_memcpy(a, &mine_first, 8);
        __builtin_memcpy(b, &theirs_second, 8);
        c[0] = a[0] + b[0], c[1] = a[1] + b[1];
        ark::vec<8> o;
        __builtin_memcpy(&o, c, 8);
        ark::dma::store_prefix<P, 8>(dst + 8 * t, o, bytes - 8 * t);
      }
      if constexpr (V >= implied) ark::dma::raise_acks(ctx, ark::dma::peers::all(), s);
    }
    // the next kernel's calls go on from here (it starts once this one has ended)
    if (t == 0) ctx.lay().state(ctx.local(), w)->round = ctx.round + static_cast<std::uint64_t>(iters);
  }
}

using kernel_t = void (*)(args);
const kernel_t kernels[] = {anatomy<packets>, anatomy<barrier>, anatomy<hwrite>,  anatomy<implied>,
                            anatomy<credit>,  anatomy<lean>,    anatomy<verdict>, anatomy<part>,
                            anatomy<share>,   anatomy<full>,    anatomy<step>,    anatomy<step2>};
static_assert(sizeof(kernels) / sizeof(kernels[0]) == variants);
#endif

int main(int argc, char** argv) {
#if defined(ARK_GPU_COMPILER)
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int launches = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int gpus = gpu::device_count();
  if (gpus < 1 || iters < 1 || launches < 1) {
    std::fprintf(stderr, gpus < 1 ? "ll_anatomy: needs a GPU\n" : "usage: ll_anatomy [ITERS [LAUNCHES]]\n");
    return 1;
  }
  const std::size_t sizes[] = {8, 8192};
  constexpr int modes = 2; // in-kernel, launched
  // us[((rank * variants + v) * 2 + size) * modes + mode]
  std::vector<double> us(2 * variants * 2 * modes, 0);
  std::vector<int> wrong(2 * variants, 0);
  auto group = std::make_shared<ark::in_process_group>(2);
  std::barrier<> sync(2);
  auto rank_main = [&](int rank) {
    namespace rt = ark::detail::rt;
    for (int v = 0; v < variants; ++v)
      for (int k = 0; k < 2; ++k) {
        comm_t::config cfg;
        cfg.device = rank % gpus;
        comm_t c(ark::in_process_bootstrap(group, rank), cfg); // fresh slots and step counters
        const std::size_t n = sizes[k] / sizeof(float);
        std::vector<float> host(n);
        for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i + 3 * rank) % 7);
        auto mem = gpu::allocate(2 * n * sizeof(float) + 64, cfg.device);
        float* in = reinterpret_cast<float*>(mem.ptr);
        float* out = in + n + 8;
        gpu::copy(in, host.data(), n * sizeof(float));
        const unsigned blocks = ark::select_workers(sizes[k], c.team().lay.workers, cfg.tuning, true);
        rt::event_t e0, e1;
        rt::check(rt::event_create(&e0), "event");
        rt::check(rt::event_create(&e1), "event");
        auto poison = [&] {
          rt::check(rt::memset_async(out, 0xff, n * sizeof(float), c.stream()), "poison");
        };
        auto count_wrong = [&] {
          gpu::copy(host.data(), out, n * sizeof(float));
          for (std::size_t i = 0; i < n; ++i)
            wrong[rank * variants + v] += host[i] != static_cast<float>(i % 7 + (i + 3) % 7);
        };
        auto timed = [&](auto&& run, int calls) {
          sync.arrive_and_wait();
          rt::check(rt::event_record(e0, c.stream()), "event");
          run();
          rt::check(rt::event_record(e1, c.stream()), "event");
          c.synchronize();
          float ms = 0;
          rt::check(rt::event_elapsed_ms(&ms, e0, e1), "event");
          return 1000.0 * ms / calls;
        };
        double* const row = &us[((rank * variants + v) * 2 + k) * modes];
        // in-kernel: one persistent kernel runs every call
        poison();
        row[0] = timed(
            [&] {
              kernels[v]<<<blocks, 512, 0, c.stream()>>>(args{c.device_handle(), in, out, n, iters});
            },
            iters);
        count_wrong();
        // launched: a kernel per call, launched early (as communicator launches its calls), in a graph
        rt::graph_t graph{};
        rt::graph_exec_t exec{};
        // early only where the kernel waits for the previous one (built for sm_90 or later), as
        // the communicator launches its own
        const bool early = rt::built_for_sm90(reinterpret_cast<const void*>(kernels[v]));
        rt::check(rt::begin_capture(c.stream()), "capture");
        for (int i = 0; i < launches; ++i) {
          if (v == full) { // the host call itself, launched as the communicator launches it
            c.all_reduce<ark::algo::one_shot, B>(in, out, n);
            continue;
          }
          if (v == step) {
            c.all_reduce<ark::algo::one_step, B>(in, out, n);
            continue;
          }
          if (v == step2) {
            c.all_reduce<ark::algo::one_step_world<2>, B>(in, out, n);
            continue;
          }
          const args a{c.device_handle(), in, out, n, 1};
#if defined(ARK_COMPILER_CUDA)
          if (early) {
            rt::check(rt::launch_early(kernels[v], blocks, 512, c.stream(), a), "launch");
            continue;
          }
#endif
          kernels[v]<<<blocks, 512, 0, c.stream()>>>(a);
        }
        rt::check(rt::end_capture(c.stream(), &graph), "capture");
        rt::check(rt::graph_instantiate(&exec, graph), "instantiate");
        timed([&] { rt::check(rt::graph_launch(exec, c.stream()), "launch graph"); }, launches); // warm-up
        double t[3];
        for (double& x : t)
          x = timed([&] { rt::check(rt::graph_launch(exec, c.stream()), "launch graph"); }, launches);
        std::sort(t, t + 3);
        row[1] = t[1];
        poison(); // one more replay, checked
        rt::check(rt::graph_launch(exec, c.stream()), "launch graph");
        c.synchronize();
        count_wrong();
        rt::check(rt::graph_exec_destroy(exec), "graph");
        rt::check(rt::graph_destroy(graph), "graph");
        (void)rt::event_destroy(e0);
        (void)rt::event_destroy(e1);
        gpu::release(mem);
        sync.arrive_and_wait(); // the peer is done with our slots before we free them
      }
  };
  int failed = 0;
  auto guarded = [&](int rank) {
    try {
      rank_main(rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ll_anatomy: rank %d: %s\n", rank, e.what());
      failed = 1;
    }
  };
  std::thread other(guarded, 1);
  guarded(0);
  other.join();
  if (failed) return 1;
  std::printf(
      "# ll_anatomy: us per all-reduce, 512 threads per block, %s; in-kernel: %d calls per persistent "
      "kernel; launched: a kernel per call, %d launched early in a CUDA graph (median of 3 replays)\n",
      gpus >= 2 ? "ranks on GPUs 0 and 1" : "both ranks on GPU 0 (no link crossed)", iters, launches);
  std::printf("%-8s %10s %10s %12s %12s %7s\n", "variant", "8 B", "8 KB", "launched 8 B", "launched 8 KB",
              "#wrong");
  int bad = 0;
  for (int v = 0; v < variants; ++v) {
    auto at = [&](int k, int m) { // the slower rank's figure
      return std::max(us[((0 * variants + v) * 2 + k) * modes + m],
                      us[((1 * variants + v) * 2 + k) * modes + m]);
    };
    std::printf("%-8s %10.2f %10.2f %12.2f %12.2f %7d\n", variant_names[v], at(0, 0), at(1, 0), at(0, 1),
                at(1, 1), wrong[v] + wrong[variants + v]);
    bad += wrong[v] + wrong[variants + v];
  }
  return bad ? 1 : 0;
#else
  (void)argc, (void)argv;
  return 0;
#endif
}
