// The GPU paths beyond single calls: 1000 back-to-back calls enqueued without a sync, calls on
// several streams, CUDA-graph
// capture and replay, the device-side API inside a persistent kernel, a peer that never joins,
// a mismatched call, large messages, one process per rank, hierarchical collectives (the
// bootstrap engine on one GPU; NCCL across GPUs where there are two).
#include "../support/persistent_loop.hpp"
#include "gpu_support.hpp"
#if defined(ARK_TEST_NCCL_ENGINE)
#include "ark/internode/nccl_engine.hpp"
#endif

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <barrier>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

using namespace ark_test;
namespace rt = ark::detail::rt;

namespace {

using i32 = std::int32_t;

/// A device buffer of n elements of T for rank `rank`.
template <class T>
struct dbuf {
  platform_buffer<gpu> b;
  std::size_t n;
  dbuf(std::size_t count, int rank) : b(count * sizeof(T), rank), n(count) {}
  T* get() const { return b.template as<T>(); }
  void upload(const std::vector<T>& v) { gpu::copy(get(), v.data(), v.size() * sizeof(T)); }
  std::vector<T> download() const {
    std::vector<T> v(n);
    gpu::copy(v.data(), get(), n * sizeof(T));
    return v;
  }
};

/// Calls of element counts drawn by `next(k)`, on 16-byte aligned slices of one buffer, in place:
/// every rank's inputs (input<i32, sum>(call, rank, i)) and the count of wrong sums after.
struct sliced_calls {
  std::vector<std::size_t> count, offset{0};
  template <class F>
  sliced_calls(int calls, F next) {
    for (int k = 0; k < calls; ++k) {
      count.push_back(next(k));
      offset.push_back(offset.back() + (count.back() + 3) / 4 * 4);
    }
  }
  i32* slice(dbuf<i32>& d, int k) const { return d.get() + offset[k]; }
  /// d holds offset.back() elements
  void upload(dbuf<i32>& d, int rank) const {
    std::vector<i32> host(offset.back());
    for (std::size_t k = 0; k < count.size(); ++k)
      for (std::size_t i = 0; i < count[k]; ++i)
        host[offset[k] + i] = input<i32, ark::op::sum>(static_cast<int>(k), rank, i);
    d.upload(host);
  }
  std::size_t wrong(const dbuf<i32>& d, int world) const {
    const auto out = d.download();
    std::size_t bad = 0;
    for (std::size_t k = 0; k < count.size(); ++k)
      for (std::size_t i = 0; i < count[k]; ++i) {
        i32 want = 0;
        for (int r = 0; r < world; ++r) want += input<i32, ark::op::sum>(static_cast<int>(k), r, i);
        bad += out[offset[k] + i] != want;
      }
    return bad;
  }
};

template <class B, class Loop>
__global__ void __launch_bounds__(512, 1) persistent_kernel(const Loop loop) {
  ark::block_scope block;
  loop(loop.comm.template make_context<B>(block, blockIdx.x, gridDim.x, ark::call_desc{}));
}

/// `calls` all-reduces (max) of n floats from inside one kernel: even ranks call A (algo::one_step
/// or one_step_world<2>), odd ranks one_shot (the same protocol). A failed call counts in *failed.
template <class A>
__global__ void __launch_bounds__(512, 1)
    one_step_calls(const ark::device_comm<gpu> comm, int rank, const float* in, float* out, std::size_t n,
                   int calls, int* failed) {
  ark::block_scope block;
  using B = ark::dma::ll_packet<4>;
  for (int k = 0; k < calls; ++k) {
    const float* i = in + k * n;
    float* o = out + k * n;
    const bool ok =
        rank % 2 == 0
            ? comm.all_reduce<A, B>(block, blockIdx.x, gridDim.x, i, o, n, ark::op::max{})
            : comm.all_reduce<ark::algo::one_shot, B>(block, blockIdx.x, gridDim.x, i, o, n, ark::op::max{});
    if (!ok) {
      if (threadIdx.x == 0) atomicAdd(failed, 1);
      return;
    }
  }
}

float one_step_input(int rank, int call, std::size_t i) {
  return static_cast<float>((static_cast<unsigned>(i) * 2654435761u ^ static_cast<unsigned>(call) * 40503u ^
                             static_cast<unsigned>(rank) * 97u) %
                            1000u) -
         500.0f;
}

} // namespace

TEST_CASE("gpu: 1000 calls of random size, algorithm and backend, enqueued back to back" * needs_gpus(1)) {
  const int world = gpu_ranks();
  using callee_t = callee<i32, gpu>;
  const callee_t callees[] = {
      make_callee<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, i32, ark::op::sum,
                  gpu>(),
      make_callee<ark::collective::all_reduce, ark::algo::one_shot, ark::dma::ll_packet<1>, i32, ark::op::sum,
                  gpu>(),
      make_callee<ark::collective::all_reduce, ark::algo::two_shot, ark::dma::thread_copy<3>, i32,
                  ark::op::sum, gpu>(),
      make_callee<ark::collective::all_reduce, ark::algo::ring, ark::dma::ll_packet<8>, i32, ark::op::sum,
                  gpu>(),
  };
  basic_world<gpu> w(world, gpu_small_config());
  std::vector<std::size_t> bad(world, 0);
  w.run([&](gpu_comm& c, int rank) {
    std::mt19937_64 rng(7); // the same sequence on every rank
    const int calls = 1000;
    std::vector<std::size_t> which(calls);
    const sliced_calls sc(calls, [&](int k) {
      const std::size_t n = rng() % 8193;
      which[k] = rng() % std::size(callees);
      return n;
    });
    dbuf<i32> d(sc.offset.back(), rank);
    sc.upload(d, rank);
    for (int k = 0; k < calls; ++k) callees[which[k]].fn(c, sc.slice(d, k), sc.slice(d, k), sc.count[k], 0);
    c.synchronize();
    bad[rank] = sc.wrong(d, world);
  });
  for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("gpu: 1000 calls in groups of 1 to 40, like calls one launch a batch; a captured group "
          "replayed" *
          needs_gpus(1)) {
  const int world = gpu_ranks();
  basic_world<gpu> w(world, gpu_small_config());
  std::vector<std::size_t> bad(world, 0), replay_bad(world, 0);
  std::vector<std::uint64_t> extra(world, 0);
  w.run([&](gpu_comm& c, int rank) {
    std::mt19937_64 rng(5); // the same sequence on every rank
    const int calls = 1000;
    // mostly small (LL one-shot), now and then up to 40000 (a batch runs its largest's choice)
    const sliced_calls sc(
        calls, [&](int) { return static_cast<std::size_t>(rng() % 8 ? rng() % 600 : rng() % 40000); });
    dbuf<i32> d(sc.offset.back(), rank), g(3 * 1024, rank);
    sc.upload(d, rank);
    g.upload(std::vector<i32>(3 * 1024, 1));
    const std::uint64_t before = c.launches();
    std::uint64_t batches = 0; // a launch for each batch_max_calls calls of a group, or fewer
    for (int k = 0; k < calls;) {
      const int size = std::min(1 + static_cast<int>(rng() % 40), calls - k);
      batches += (size + ark::detail::batch_max_calls - 1) / ark::detail::batch_max_calls;
      c.group_start();
      for (int j = 0; j < size; ++j, ++k) c.all_reduce(sc.slice(d, k), sc.slice(d, k), sc.count[k]);
      c.group_end();
    }
    c.synchronize();
    extra[rank] = c.launches() - before - batches; // 0 when every batch was one launch
    bad[rank] = sc.wrong(d, world);
    // a group of three captured once: each replay sums in place again, so twice makes world^2
    const captured_graph graph(c.stream(), [&] {
      c.group_start();
      for (int j = 0; j < 3; ++j) c.all_reduce(g.get() + j * 1024, g.get() + j * 1024, 1000 + j * 7);
      c.group_end();
    });
    for (int replay = 0; replay < 2; ++replay) graph.launch();
    c.synchronize();
    const auto got = g.download();
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 1024; ++i)
        replay_bad[rank] += got[j * 1024 + i] != (i < 1000 + j * 7 ? world * world : 1);
  });
  for (int r = 0; r < world; ++r) {
    CHECK(bad[r] == 0);
    CHECK(extra[r] == 0);
    CHECK(replay_bad[r] == 0);
  }
}

TEST_CASE("gpu: fused groups, every collective kind with a ring shift (LL-sized and large) and a send "
          "to itself, one launch a group; 30 rounds, then a captured group replayed" *
          needs_gpus(1)) {
  const int world = gpu_ranks();
  basic_world<gpu> w(world, gpu_small_config());
  std::vector<std::size_t> bad(world, 0), replay_bad(world, 0);
  std::vector<std::uint64_t> launches(world, 0);
  w.run([&](gpu_comm& c, int rank) {
    namespace calls = ark::calls;
    const std::size_t W = static_cast<std::size_t>(world), n = 3001, m = 517, big = 30000, small = 100;
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    auto v = [](int r, std::size_t i, int which, int k) {
      return static_cast<i32>((r + 1) * 100 + static_cast<int>(i % 89) + which * 7 + k);
    };
    dbuf<i32> ar(n, rank), ar_out(n, rank), blocks(m * W, rank), rs_out(m, rank), ag_out(m * W, rank);
    dbuf<i32> bc(m, rank), red(m, rank), g_out(m * W, rank), sc_out(m, rank), a2a_out(m * W, rank);
    dbuf<i32> big_in(big, rank), big_out(big, rank), small_in(small, rank), small_out(small, rank);
    dbuf<i32> self_out(small, rank);
    auto fill = [&](dbuf<i32>& d, int who, int which, int k) {
      std::vector<i32> h(d.n);
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = v(who, i, which, k);
      d.upload(h);
    };
    auto poison = [](dbuf<i32>& d) { d.upload(std::vector<i32>(d.n, -1)); };
    const std::uint64_t before = c.launches();
    for (int k = 0; k < 30; ++k) {
      const int root = k % world;
      fill(ar, rank, 0, k), fill(blocks, rank, 1, k), fill(big_in, rank, 2, k), fill(small_in, rank, 3, k);
      for (dbuf<i32>* d :
           {&ar_out, &rs_out, &ag_out, &bc, &red, &g_out, &sc_out, &a2a_out, &big_out, &small_out, &self_out})
        poison(*d);
      c.group(calls::all_reduce(ar.get(), ar_out.get(), n), calls::send(big_in.get(), big, next),
              calls::reduce_scatter(blocks.get(), rs_out.get(), m), calls::recv(big_out.get(), big, prev),
              calls::all_gather(ar.get(), ag_out.get(), m), calls::broadcast(ar.get(), bc.get(), m, root),
              calls::reduce(ar.get(), red.get(), m, root, ark::op::max{}),
              calls::gather(ar.get(), g_out.get(), m, root),
              calls::scatter(blocks.get(), sc_out.get(), m, root),
              calls::all_to_all(blocks.get(), a2a_out.get(), m), calls::recv(small_out.get(), small, prev),
              calls::send(small_in.get(), small, next), calls::send(small_in.get(), small, rank),
              calls::recv(self_out.get(), small, rank));
      c.synchronize();
      const auto o_ar = ar_out.download(), o_rs = rs_out.download(), o_ag = ag_out.download();
      const auto o_bc = bc.download(), o_red = red.download(), o_g = g_out.download(),
                 o_sc = sc_out.download();
      const auto o_a2a = a2a_out.download(), o_big = big_out.download(), o_small = small_out.download();
      const auto o_self = self_out.download();
      auto sum = [&](std::size_t i, int which) {
        i32 s = 0;
        for (int r = 0; r < world; ++r) s += v(r, i, which, k);
        return s;
      };
      std::size_t& b = bad[rank];
      for (std::size_t i = 0; i < n; ++i) b += o_ar[i] != sum(i, 0);
      for (std::size_t i = 0; i < m; ++i) {
        b += o_rs[i] != sum(rank * m + i, 1);
        b += o_bc[i] != v(root, i, 0, k);
        b += o_sc[i] != v(root, rank * m + i, 1, k);
        b += o_red[i] != (rank == root ? v(world - 1, i, 0, k) : -1); // the largest rank's is the max
        for (int r = 0; r < world; ++r) {
          b += o_ag[r * m + i] != v(r, i, 0, k);
          b += o_g[r * m + i] != (rank == root ? v(r, i, 0, k) : -1);
          b += o_a2a[r * m + i] != v(r, rank * m + i, 1, k);
        }
      }
      for (std::size_t i = 0; i < big; ++i) b += o_big[i] != v(prev, i, 2, k);
      for (std::size_t i = 0; i < small; ++i)
        b += o_small[i] != v(prev, i, 3, k) || o_self[i] != v(rank, i, 3, k);
    }
    launches[rank] = c.launches() - before;
    // a fused group captured once: each replay sums `ar` into itself and shifts the ring again
    fill(ar, rank, 0, 0);
    fill(big_in, rank, 2, 0);
    poison(big_out);
    const captured_graph graph(c.stream(), [&] {
      c.group(calls::all_reduce(ar.get(), ar.get(), n), calls::send(big_in.get(), big, next),
              calls::recv(big_out.get(), big, prev));
    });
    for (int replay = 0; replay < 2; ++replay) graph.launch();
    c.synchronize();
    const auto got = ar.download(), shifted = big_out.download();
    for (std::size_t i = 0; i < n; ++i) {
      i32 s1 = 0;
      for (int r = 0; r < world; ++r) s1 += v(r, i, 0, 0);
      replay_bad[rank] += got[i] != s1 * world;
    }
    for (std::size_t i = 0; i < big; ++i) replay_bad[rank] += shifted[i] != v(prev, i, 2, 0);
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(bad[r] == 0);
    CHECK(launches[r] == 30);
    CHECK(replay_bad[r] == 0);
  }
}

TEST_CASE("gpu: ranks as threads call freely, each waiting for its own stream after every call (an NCCL "
          "program's pattern: all-reduce, reduce-scatter, in-place reduce)" *
          needs_gpus(1)) {
  // The NCCL API's C test fails this way through apps/nccl with three ranks as threads on one GPU
  // (docs/perf.md): here the same calls go through ark's own API, with no barrier between
  // the ranks after their streams are made.
  const int world = std::max(gpu_ranks(), 3);
  using T = std::int8_t;
  basic_world<gpu> w(world, gpu_comm::config{});
  std::barrier streams_made(world);
  std::vector<std::size_t> bad(world, 0);
  w.run([&](gpu_comm& c, int rank) {
    // the stream and the memory before any rank calls (docs/guide.md, "Ranks that share a GPU")
    const gpu::stream s = gpu::create_stream(rank_device<gpu>(rank));
    dbuf<T> in(1000 * world, rank), out(1000 * world, rank);
    streams_made.arrive_and_wait();
    ark::call_options<gpu> o;
    o.stream = s;
    const int root = world - 1;
    for (int k = 0; k < 40; ++k)
      for (const std::size_t n : {std::size_t{1000}, std::size_t{3}}) {
        auto v = [&](int r, std::size_t i) { return static_cast<T>((r + 3 * k + static_cast<int>(i)) % 5); };
        auto sum = [&](std::size_t i) {
          int x = 0;
          for (int r = 0; r < world; ++r) x += v(r, i);
          return static_cast<T>(x);
        };
        std::vector<T> h(n * world);
        for (std::size_t i = 0; i < h.size(); ++i) h[i] = v(rank, i);
        in.upload(h);
        out.upload(std::vector<T>(n * world, T(0x5a)));
        auto read_back = [&] {
          rt::check(rt::stream_synchronize(s), "synchronize");
          return out.download();
        };
        c.all_reduce(in.get(), out.get(), n, ark::op::sum{}, o);
        auto got = read_back();
        for (std::size_t i = 0; i < n; ++i) bad[rank] += got[i] != sum(i);
        c.reduce_scatter(in.get(), out.get(), n, ark::op::sum{}, o);
        got = read_back();
        for (std::size_t i = 0; i < n; ++i) bad[rank] += got[i] != sum(rank * n + i);
        c.reduce(in.get(), in.get(), n, root, ark::op::sum{}, o); // in place, as the C test calls it
        rt::check(rt::stream_synchronize(s), "synchronize");
        if (rank == root) {
          got = in.download(); // its first n elements hold the reduction
          for (std::size_t i = 0; i < n; ++i) bad[rank] += got[i] != sum(i);
        }
      }
    c.synchronize();
    gpu::destroy_stream(s);
  });
  for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
}

namespace {
/// Every hierarchical collective on 1, 1001 and 5000 floats, on a user stream of each rank's, at
/// `world` ranks as threads in nodes of `local` ranks each (rank r in node r / local, on GPU
/// device_of(r)), the rails' engines made by make(rail bootstrap, rank); a small scratch, so
/// reduce-scatter, all-gather, all-to-all and reduce run in many chunks. Adds each rank's wrong
/// elements to bad, its error's text to errors; then after(communicator, rank).
template <class E, class Make, class After = void (*)(ark::hierarchical_communicator<gpu, E>&, int)>
void hierarchy_round(
    int world, int local, int (*device_of)(int), Make make, std::vector<std::size_t>& bad,
    std::vector<std::string>& errors, After after = [](ark::hierarchical_communicator<gpu, E>&, int) {}) {
  using hcomm = ark::hierarchical_communicator<gpu, E>;
  auto group = std::make_shared<ark::in_process_group>(world);
  std::barrier made(world);
  std::vector<std::thread> ts;
  for (int rank = 0; rank < world; ++rank)
    ts.emplace_back([&, rank] {
      try {
        const int device = device_of(rank);
        gpu::use_device(device);
        typename hcomm::config cfg;
        cfg.local = gpu_small_config();
        cfg.local.device = device;
        cfg.nodes.name = "node" + std::to_string(rank / local);
        cfg.nodes.ranks_per_node = 0;
        cfg.scratch_bytes = 4096;
        hcomm c(
            ark::in_process_bootstrap(group, rank), [&](auto rail) { return make(std::move(rail), rank); },
            cfg);
        const std::size_t most = 5000;
        const gpu::stream s = gpu::create_stream(device);
        dbuf<float> in(most * world, rank), out(most * world, rank);
        made.arrive_and_wait(); // streams and memory before any call (docs/guide.md, "Ranks that share a
                                // GPU")
        ark::call_options<gpu> o;
        o.stream = s;
        auto value = [](int r, std::size_t i) {
          return static_cast<float>((r + 1) * static_cast<int>(i % 13));
        };
        for (const std::size_t n : {std::size_t{1}, std::size_t{1001}, most}) {
          std::vector<float> h(n * world);
          for (std::size_t i = 0; i < h.size(); ++i) h[i] = value(rank, i);
          in.upload(h);
          auto sum = [&](std::size_t i) {
            float x = 0;
            for (int r = 0; r < world; ++r) x += value(r, i);
            return x;
          };
          auto fetch = [&](std::size_t k) {
            rt::check(rt::stream_synchronize(s), "synchronize");
            auto v = out.download();
            v.resize(k);
            return v;
          };
          out.upload(std::vector<float>(n * world, -1.0f));
          c.all_reduce(in.get(), out.get(), n, ark::op::sum{}, o);
          auto got = fetch(n);
          for (std::size_t i = 0; i < n; ++i) bad[rank] += got[i] != sum(i);
          c.reduce_scatter(in.get(), out.get(), n, ark::op::avg{}, o);
          got = fetch(n);
          for (std::size_t i = 0; i < n; ++i) // NCCL divides by a PreMulSum: not exact at every world
            bad[rank] += std::abs(got[i] - sum(rank * n + i) / world) > 1e-5f * sum(rank * n + i);
          c.all_gather(in.get(), out.get(), n, o);
          got = fetch(n * world);
          for (int q = 0; q < world; ++q)
            for (std::size_t i = 0; i < n; ++i) bad[rank] += got[q * n + i] != value(q, i);
          out.upload(std::vector<float>(n * world, -1.0f));
          c.all_to_all(in.get(), out.get(), n, o); // block q from rank q: its block `rank`
          got = fetch(n * world);
          for (int q = 0; q < world; ++q)
            for (std::size_t i = 0; i < n; ++i) bad[rank] += got[q * n + i] != value(q, rank * n + i);
          c.broadcast(in.get(), out.get(), n, 3, o);
          got = fetch(n);
          for (std::size_t i = 0; i < n; ++i) bad[rank] += got[i] != value(3, i);
          out.upload(std::vector<float>(n, -1.0f));
          c.reduce(in.get(), out.get(), n, 1, ark::op::max{}, o);
          got = fetch(n);
          for (std::size_t i = 0; i < n; ++i)
            bad[rank] += got[i] != (rank == 1 ? value(world - 1, i) : -1.0f);
        }
        c.local().synchronize();
        gpu::destroy_stream(s);
        after(c, rank);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (auto& t : ts) t.join();
}
int on_gpu_0(int) { return 0; }
int gpu_of_node_of_two(int rank) { return rank / 2; }
} // namespace

TEST_CASE("gpu: hierarchical collectives, two nodes of two ranks and four nodes of one sharing the GPU, the "
          "bootstrap engine between them" *
          needs_gpus(1)) {
  // ark's communicator inside each node on the GPU, the engine's steps staged through pinned host
  // memory in chunks, pipelined with the node's steps; one rank a node: the engine alone, staged
  const int world = 4;
  for (const int local : {2, 1}) {
    CAPTURE(local);
    std::vector<std::size_t> bad(world, 0);
    std::vector<std::string> errors(world);
    hierarchy_round<ark::bootstrap_engine>(
        world, local, on_gpu_0, [](auto rail, int) { return ark::bootstrap_engine(std::move(rail)); }, bad,
        errors);
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(bad[r] == 0);
    }
  }
}

namespace {
/// An engine that takes GPU memory, as a GPU-aware MPI does (internode/engine.hpp): each call
/// copies its device buffers to the host, runs the bootstrap engine there and copies the result
/// back, as Open MPI's CUDA-aware collectives do without GPUDirect. It counts the calls whose
/// buffers were not GPU memory and the averages it was asked to divide: the communicator owes it
/// device memory and divides itself.
class device_memory_engine {
public:
  explicit device_memory_engine(ark::bootstrap_engine e) : e_(std::move(e)) {}
  bool device_memory() const { return true; }
  int rank() { return e_.rank(); }
  int size() { return e_.size(); }
  std::size_t misuse = 0, calls = 0;

  void all_reduce(const void* in, void* out, std::size_t n, ark::dtype t, ark::engine_reduction r) {
    const std::size_t b = n * ark::size_of(t);
    host(in, b, out, b, r, [&](const void* i, void* o) { e_.all_reduce(i, o, n, t, r); });
  }
  void reduce_scatter(const void* in, void* out, std::size_t n, ark::dtype t, ark::engine_reduction r) {
    const std::size_t b = n * ark::size_of(t);
    host(in, b * size(), out, b, r, [&](const void* i, void* o) { e_.reduce_scatter(i, o, n, t, r); });
  }
  void all_gather(const void* in, void* out, std::size_t bytes) {
    host(in, bytes, out, bytes * size(), {}, [&](const void* i, void* o) { e_.all_gather(i, o, bytes); });
  }
  void broadcast(const void* in, void* out, std::size_t bytes, int root) {
    host(rank() == root ? in : nullptr, rank() == root ? bytes : 0, out, bytes, {},
         [&](const void* i, void* o) { e_.broadcast(i, o, bytes, root); });
  }
  void reduce(const void* in, void* out, std::size_t n, ark::dtype t, ark::engine_reduction r, int root) {
    const std::size_t b = n * ark::size_of(t);
    host(in, b, rank() == root ? out : nullptr, rank() == root ? b : 0, r,
         [&](const void* i, void* o) { e_.reduce(i, o, n, t, r, root); });
  }
  void all_to_all(const void* in, void* out, std::size_t bytes) {
    host(in, bytes * size(), out, bytes * size(), {},
         [&](const void* i, void* o) { e_.all_to_all(i, o, bytes); });
  }

private:
  template <class F>
  void host(const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes, ark::engine_reduction r,
            F f) {
    ++calls;
    misuse += r.divide_by != 1;
    int d = 0;
    misuse += in_bytes && rt::pointer_device(&d, in) != rt::success;
    misuse += out_bytes && rt::pointer_device(&d, out) != rt::success;
    std::vector<std::byte> i(in_bytes), o(out_bytes);
    if (in_bytes) gpu::copy(i.data(), in, in_bytes);
    f(i.data(), o.data());
    if (out_bytes) gpu::copy(out, o.data(), out_bytes);
  }
  ark::bootstrap_engine e_;
};
} // namespace

TEST_CASE("gpu: hierarchical collectives over an engine that takes GPU memory (a GPU-aware MPI's way), two "
          "nodes of two ranks and four nodes of one sharing the GPU" *
          needs_gpus(1)) {
  // the engine gets the communicator's staging in GPU memory, undivided averages, and the same
  // pipeline as through pinned memory
  const int world = 4;
  for (const int local : {2, 1}) {
    CAPTURE(local);
    std::vector<std::size_t> bad(world, 0), misuse(world, 0), calls(world, 0);
    std::vector<std::string> errors(world);
    hierarchy_round<device_memory_engine>(
        world, local, on_gpu_0,
        [](auto rail, int) { return device_memory_engine(ark::bootstrap_engine(std::move(rail))); }, bad,
        errors,
        [&](auto& c, int rank) {
          misuse[rank] = c.engine()->misuse;
          calls[rank] = c.engine()->calls;
        });
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(bad[r] == 0);
      CHECK(misuse[r] == 0);
      CHECK(calls[r] > 0);
    }
  }
}

#if defined(ARK_TEST_NCCL_ENGINE)
TEST_CASE("gpu: hierarchical collectives over NCCL, a node a GPU of two ranks, NCCL across the GPUs" *
          needs_gpus(2)) {
  // the rails cross GPUs (NCCL needs a GPU per rank of its communicator); each node's two ranks
  // share its GPU; NCCL gets the buffers themselves on the call's stream
  const int world = 2 * gpu_count();
  std::vector<std::size_t> bad(world, 0);
  std::vector<std::string> errors(world);
  hierarchy_round<ark::nccl_engine>(
      world, 2, gpu_of_node_of_two,
      [](auto rail, int rank) { return ark::nccl_engine(std::move(rail), gpu_of_node_of_two(rank)); }, bad,
      errors);
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(bad[r] == 0);
  }
}
#endif

namespace {
constexpr int several_streams_calls = 400;
/// The calls-on-several-streams case's world, the ranks on GPU 0 (the most), and the streams each
/// rank makes beyond the communicator's (the case says why): known before main, so that a world
/// that leaves none skips the case.
struct several_streams_plan {
  int world = 0, sharers = 0, own = 0;
  several_streams_plan() {
    const int gpus = gpu_count();
    if (gpus < 1) return;
    world = gpu_ranks();
    sharers = (world + gpus - 1) / gpus;
    const int held = static_cast<int>(ark::detail::held_streams(false)); // the communicator's (docs/guide.md)
    own = sharers > 1 ? (gpu::hardware_queues() - 1) / sharers - held : 2 + several_streams_calls / 100;
  }
};
} // namespace

TEST_CASE("gpu: calls on several streams, enqueued back to back, run one after the other" * needs_gpus(1) *
          skip_unless(gpu_count() < 1 || several_streams_plan().own >= 1,
                      "the ranks that share a GPU leave none of its hardware queues for a stream of the case "
                      "(ARK_GPU_RANKS, CUDA_DEVICE_MAX_CONNECTIONS)")) {
  // The communicator's stream, two of ours, and now and then one for a single call, destroyed
  // right after it (the next call must still wait for that one): calls that ran side by side
  // would share the workers' steps and scratch, and mix their data. Every stream is made before
  // any rank's first call: where ranks share a GPU, making one can wait for the kernels running there,
  // a peer's waiting for this rank among them (docs/guide.md, "Ranks that share a GPU"); there the
  // one-call streams are also kept to the end (whether destroying one waits too is not known),
  // and every stream needs a hardware queue of its own (docs/guide.md): the context's own stream takes
  // one, and a rank holds two already (its communicator's stream, the helpers' one), so the case
  // makes what is left of the rank's share of the others (at four ranks on one GPU:
  // 31 / 4 - 2 = 5; with 5 + 6 streams a rank, 44, it timed out, run ce).
  // Within that share it still timed out now and then (runs cg-cj: 8 of 23 runs at three ranks,
  // early launch on or off, 3 of 13 at four, 1 of 23 at two), until every stream was used once
  // before the first call (run cj: 0 of 10 at three ranks), which gpu::create_stream now does.
  const several_streams_plan plan;
  REQUIRE(plan.own >= 1); // the decorator skips the case otherwise: reached only under --no-skip
  const int world = plan.world, calls = several_streams_calls, own = plan.own;
  const bool shared = plan.sharers > 1;
  const int streams = std::min(own, 2), singles = std::min(own - streams, calls / 100);
  basic_world<gpu> w(world, gpu_small_config());
  std::vector<std::size_t> bad(world, 0);
  std::barrier made(world); // every rank's streams made before any rank's first call
  w.run([&](gpu_comm& c, int rank) {
    std::mt19937_64 rng(11); // the same sequence on every rank
    // LL one-shot, and one-shot over thread copies above 64 KB
    const sliced_calls sc(calls, [&](int) { return static_cast<std::size_t>(rng() % 40000); });
    dbuf<i32> d(sc.offset.back(), rank);
    sc.upload(d, rank);
    const int device = c.configuration().device;
    std::vector<gpu::stream> ours, once; // `streams`, and one for call 3 of the first `singles` hundreds
    try {
      for (int i = 0; i < streams; ++i) ours.push_back(gpu::create_stream(device));
      for (int i = 0; i < singles; ++i) once.push_back(gpu::create_stream(device));
    } catch (...) {
      made.arrive_and_drop(); // the others go on (and time out): no wait for this rank
      throw;
    }
    made.arrive_and_wait();
    for (int k = 0; k < calls; ++k) {
      ark::call_options<gpu> o;
      gpu::stream* single = k % 100 == 3 && k / 100 < singles ? &once[k / 100] : nullptr;
      const int turn = k % (streams + 1); // 0: the communicator's stream
      o.stream = single ? *single : turn == 0 ? gpu::stream{} : ours[turn - 1];
      c.all_reduce(sc.slice(d, k), sc.slice(d, k), sc.count[k], ark::op::sum{}, o);
      if (single && !shared) { // its work still runs: CUDA releases the stream after
        gpu::destroy_stream(*single);
        *single = {};
      }
    }
    for (auto& v : {ours, once})
      for (auto s : v)
        if (s) {
          gpu::synchronize(s);
          gpu::destroy_stream(s);
        }
    c.synchronize(); // the last call ran on the communicator's stream; throws what a call recorded
    bad[rank] = sc.wrong(d, world);
  });
  for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("gpu: collectives captured in a CUDA graph give the right result on every replay, zero-copy over "
          "registered buffers too" *
          needs_gpus(1)) {
  const int world = gpu_ranks();
  basic_world<gpu> w(world, gpu_small_config());
  std::vector<std::size_t> bad(world, 0);
  w.run([&](gpu_comm& c, int rank) {
    const std::size_t n = 40000;
    auto input = [&](int replay, int r, std::size_t i) { return static_cast<float>((i + r + replay) % 9); };
    std::vector<float> in(n);
    dbuf<float> src(n, rank), a(n, rank), b(n, rank), d(n, rank), z(n, rank);
    c.register_buffer(src.get(), n * sizeof(float)); // zero-copy reads every rank's src and z
    c.register_buffer(z.get(), n * sizeof(float));
    const auto s = c.stream();
    const captured_graph graph(s, [&] {
      c.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<2>>(src.get(), a.get(), 1000);
      c.all_reduce<ark::algo::two_shot, ark::dma::thread_copy<4>>(src.get(), b.get(), n);
      c.all_reduce<ark::algo::ring, ark::dma::thread_copy<1>>(src.get(), d.get(), n);
      c.all_reduce<ark::algo::zero_copy>(src.get(), z.get(), n);
    });
    for (int replay = 0; replay < 5; ++replay) { // new inputs each time: the replay reads them
      for (std::size_t i = 0; i < n; ++i) in[i] = input(replay, rank, i);
      src.upload(in);
      for (auto* buf : {&a, &b, &d, &z})
        rt::check(rt::memset_async(buf->get(), 0xff, n * sizeof(float), s), "poison");
      graph.launch();
      c.synchronize();
      const auto ra = a.download(), rb = b.download(), rd = d.download(), rz = z.download();
      for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += input(replay, r, i);
        bad[rank] += (i < 1000 && ra[i] != want) + (rb[i] != want) + (rd[i] != want) + (rz[i] != want);
      }
    }
    c.deregister_buffer(z.get());
    c.deregister_buffer(src.get());
  });
  for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
}

TEST_CASE("gpu device-side API: a persistent kernel loops compute + all-reduce with no host involvement" *
          needs_gpus(1)) {
  for (int world : gpu_worlds()) {
    basic_world<gpu> w(world, gpu_small_config());
    std::vector<std::size_t> bad(world, 0);
    w.run([&](gpu_comm& c, int rank) {
      const std::size_t n = 50000;
      const int iterations = 50;
      dbuf<std::int64_t> data(n, rank);
      using ll = ark_test::persistent_loop<ark::dma::ll_packet<4>, ark::device_comm<gpu>>;
      using tc = ark_test::persistent_loop<ark::dma::thread_copy<2>, ark::device_comm<gpu>>;
      persistent_kernel<ark::dma::ll_packet<4>>
          <<<4, 256, 0, c.stream()>>>(ll{c.device_handle(), data.get(), n, iterations, rank});
      c.synchronize();
      for (std::size_t i = 0; i < n; i += 7)
        bad[rank] += data.download()[i] != ark_test::persistent_loop_expected(i, iterations, world);
      persistent_kernel<ark::dma::thread_copy<2>>
          <<<8, 512, 0, c.stream()>>>(tc{c.device_handle(), data.get(), n, iterations, rank});
      c.synchronize();
      const auto out = data.download();
      for (std::size_t i = 0; i < n; ++i)
        bad[rank] += out[i] != ark_test::persistent_loop_expected(i, iterations, world);
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("gpu device-side API: algo::one_step in a persistent kernel, the peers on one_shot, 200 calls" *
          needs_gpus(1)) {
  auto check = [](auto algorithm, int world) {
    using A = decltype(algorithm);
    basic_world<gpu> w(world, gpu_small_config());
    std::vector<std::size_t> bad(world, 0);
    std::vector<int> failed(world, -1);
    w.run([&](gpu_comm& c, int rank) {
      // 8 workers of 256 threads: shares of 376 floats, within one step (512 fit)
      const std::size_t n = 3001;
      const int calls = 200;
      std::vector<float> in(calls * n);
      for (int k = 0; k < calls; ++k)
        for (std::size_t i = 0; i < n; ++i) in[k * n + i] = one_step_input(rank, k, i);
      dbuf<float> din(calls * n, rank), dout(calls * n + 1, rank);
      din.upload(in);
      dout.upload(std::vector<float>(calls * n + 1, -1e30f)); // poison, and a guard past the end
      dbuf<int> dfailed(1, rank);
      dfailed.upload({0});
      one_step_calls<A><<<8, 256, 0, c.stream()>>>(c.device_handle(), rank, din.get(), dout.get(), n, calls,
                                                   dfailed.get());
      c.synchronize();
      failed[rank] = dfailed.download()[0];
      const auto out = dout.download();
      for (int k = 0; k < calls; ++k)
        for (std::size_t i = 0; i < n; ++i) {
          float want = one_step_input(0, k, i);
          for (int r = 1; r < world; ++r) want = std::max(want, one_step_input(r, k, i));
          bad[rank] += out[k * n + i] != want;
        }
      bad[rank] += out[calls * n] != -1e30f;
    });
    for (int r = 0; r < world; ++r) {
      CAPTURE(world);
      CAPTURE(r);
      CHECK(failed[r] == 0);
      CHECK(bad[r] == 0);
    }
  };
  for (int world : gpu_worlds()) {
    check(ark::algo::one_step{}, world);
    if (world == 2) check(ark::algo::one_step_world<2>{}, world); // the two-rank path alone
  }
}

TEST_CASE("gpu: more threads per worker than the collective kernel is built for is refused at construction" *
          needs_gpus(1)) {
  auto cfg = gpu_small_config();
  cfg.tuning.threads = 2 * gpu::max_worker_threads;
  auto group = std::make_shared<ark::in_process_group>(1);
  CHECK_THROWS_WITH_AS(gpu_comm(ark::in_process_bootstrap(group, 0), cfg),
                       doctest::Contains("threads per block"), ark::invalid_argument);
}

TEST_CASE("gpu: memory() accounts for what a communicator takes from the GPU, at worlds 2, 4 and 8" *
          needs_gpus(1)) {
  for (int world : {2, 4, 8})
    for (bool automatic : {true, false}) {
      CAPTURE(world);
      CAPTURE(automatic);
      gpu_comm::config cfg;                            // the defaults: automatic slots in the scratch budget
      if (!automatic) cfg.team.slot_bytes = 512 << 10; // explicit: every worker's slots, whatever the world
      const std::size_t before = gpu::free_memory(0);
      std::vector<std::size_t> reported(world, 0);
      {
        basic_world<gpu> w(world, cfg);
        w.run([&](gpu_comm& c, int rank) {
          const ark::memory_report m = c.memory();
          CHECK(m.scratch == gpu_comm::required_scratch(world, cfg.team));
          if (automatic) CHECK(m.scratch <= cfg.team.scratch_budget);
          CHECK(m.workers == c.team().lay.workers);
          CHECK(m.slot_bytes == c.team().lay.slot_bytes);
          reported[rank] = rank_device<gpu>(rank) == 0 ? m.device_bytes() : 0;
        });
        const std::size_t after = gpu::free_memory(0);
        std::size_t sum = 0;
        for (auto b : reported) sum += b;
        const std::size_t taken = before > after ? before - after : 0;
        const ark::layout l = ark::make_layout(world, cfg.team);
        MESSAGE("world " << world << (automatic ? ", automatic slots" : ", 512 KB slots") << ": GPU 0 lost "
                         << taken / 1048576 << " MiB; its ranks report " << sum / 1048576 << " MiB ("
                         << reported[0] / 1048576 << " MiB each: " << l.workers << " workers' slots of "
                         << l.slot_bytes / 1024 << " KiB)");
        CHECK(taken + (2u << 20) * world >= sum);  // the report is all there: the allocator rounds up
        CHECK(taken <= sum + (64u << 20) * world); // and little beside it (streams, events, rounding)
      }
    }
}

TEST_CASE("gpu: a communicator that does not fit in the free memory fails on every rank, saying so, keeping "
          "nothing" *
          needs_gpus(1)) {
  const int world = gpu_ranks();
  gpu_comm::config cfg; // explicit slots: hundreds of MB, so that the runtime keeps room of its own
  cfg.team.slot_bytes = 512 << 10;
  cfg.timeout = std::chrono::milliseconds(5000);
  const std::size_t need = gpu_comm::required_scratch(world, cfg.team);
  // take every GPU's free memory but half a region
  std::vector<gpu::memory> filler;
  for (int d = 0; d < gpu_count(); ++d)
    for (std::size_t free = gpu::free_memory(d); free > need / 2 + (1u << 20); free = gpu::free_memory(d)) {
      const std::size_t chunk = std::min<std::size_t>(free - need / 2, std::size_t{1} << 30);
      try {
        filler.push_back(gpu::allocate(chunk, d));
      } catch (const ark::platform_error&) {
        break;
      }
    }
  const std::size_t before = gpu::free_memory(0);
  {
    basic_world<gpu> w(world, cfg);
    const auto errs = w.try_run([](gpu_comm&, int) {});
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      REQUIRE(errs[r]);
      try {
        std::rethrow_exception(errs[r]);
      } catch (const ark::out_of_memory& e) {
        CHECK(std::string(e.what()).find("could not allocate its symmetric scratch") != std::string::npos);
        CHECK(std::string(e.what()).find("lower team_config.slot_bytes") != std::string::npos);
        CHECK(e.needed() == need);
        CHECK(e.free() < need);
      } catch (const std::exception& e) {
        FAIL("rank " << r << ": another error: " << e.what());
      }
    }
  }
  CHECK(gpu::free_memory(0) + (8u << 20) >= before); // nothing kept, within the allocator's granularity
  for (auto& m : filler) gpu::release(m);
  basic_world<gpu> w(world, cfg); // with room, the same configuration is built
  w.run([&](gpu_comm& c, int) { CHECK(c.memory().scratch == need); });
}

TEST_CASE("gpu: a peer that never joins becomes a timeout error within the bound; teardown is clean" *
          needs_gpus(1)) {
  using namespace std::chrono_literals;
  const int world = gpu_ranks();
  std::chrono::milliseconds took{};
  int peer = -2;
  {
    basic_world<gpu> w(world, gpu_small_config());
    const auto errs = w.try_run([&](gpu_comm& c, int rank) {
      if (rank != 0) return; // nobody else calls
      dbuf<float> d(4096, rank);
      ark::call_options<gpu> o;
      o.timeout = 500ms;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        c.all_reduce(d.get(), d.get(), 4096, ark::op::sum{}, o);
        c.synchronize();
      } catch (const ark::timeout_error& e) {
        took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
        peer = e.record().peer;
        throw;
      }
    });
    REQUIRE(errs[0]);
    CHECK_THROWS_AS(std::rethrow_exception(errs[0]), ark::timeout_error);
    CHECK(took >= 500ms);
    CHECK(took < 3000ms);
    CHECK(peer >= 1);
  }
}

TEST_CASE("gpu: a count that differs between ranks is a mismatch error, the outputs untouched" *
          needs_gpus(1)) {
  const int world = gpu_ranks();
  basic_world<gpu> w(world, gpu_small_config());
  std::vector<std::vector<float>> outs(world);
  const auto errs = w.try_run([&](gpu_comm& c, int rank) {
    dbuf<float> in(1000, rank), out(1000, rank);
    out.upload(std::vector<float>(1000, -7.0f));
    try {
      c.all_reduce<ark::algo::one_shot, ark::dma::thread_copy<2>>(in.get(), out.get(), rank ? 600 : 500);
      c.synchronize();
    } catch (...) {
      outs[rank] = out.download();
      throw;
    }
  });
  for (int r = 0; r < world; ++r) {
    REQUIRE(errs[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::mismatch_error);
    for (float v : outs[r]) REQUIRE(v == -7.0f);
  }
}

namespace {
/// A rank's input of the large-message cases: small integers, exact as floats through a few
/// all-reduces of a few ranks.
std::vector<float> small_ints(std::size_t n, int rank) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + rank * 13) % 101);
  return v;
}

/// Elements of `got` that are not the result of `calls` sums of small_ints over `world` ranks, each
/// after the first in place: world^(calls - 1) times the sum.
std::size_t wrong_after(const std::vector<float>& got, int world, int calls) {
  float scale = 1;
  for (int k = 1; k < calls; ++k) scale *= static_cast<float>(world);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    float once = 0;
    for (int r = 0; r < world; ++r) once += static_cast<float>((i * 7 + r * 13) % 101);
    bad += got[i] != once * scale;
  }
  return bad;
}
} // namespace

TEST_CASE("gpu: large messages, every all-reduce algorithm, the default configuration" * needs_gpus(1)) {
  const std::size_t n = std::size_t(64) << 20; // 256 MB of floats per rank
  for (int world : gpu_worlds()) {
    basic_world<gpu> w(world, gpu_comm::config{}); // a shared GPU's SMs split by the library (block_cap)
    std::vector<std::size_t> bad(world, 0);
    w.run([&](gpu_comm& c, int rank) {
      dbuf<float> d(n, rank), out(n, rank);
      d.upload(small_ints(n, rank));
      c.all_reduce<ark::algo::one_shot, ark::dma::thread_copy<2>>(d.get(), out.get(), n);
      c.all_reduce<ark::algo::two_shot, ark::dma::thread_copy<2>>(out.get(), out.get(), n);
      c.all_reduce<ark::algo::ring, ark::dma::thread_copy<1>>(out.get(), out.get(), n);
      c.all_reduce(out.get(), out.get(), n); // automatic
      c.synchronize();
      bad[rank] = wrong_after(out.download(), world, 4);
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}

namespace {
/// A custom collective: every worker of every rank meets at a barrier.
struct meet {
  template <class Ctx>
  ARK_HD void operator()(const Ctx& ctx) const {
    ctx.barrier();
  }
};
} // namespace

TEST_CASE("gpu: ranks that share a GPU split its SMs; a call that asks for more blocks is refused" *
          needs_gpus(1)) {
  int sms = 0;
  ark::detail::rt::check(ark::detail::rt::multiprocessor_count(&sms, 0), "query SMs");
  const std::size_t n = (std::size_t(16) << 20) + 3; // 64 MB: the default wants more blocks than a share
  for (int world : gpu_worlds())
    for (const bool early : {true, false}) {
      CAPTURE(world);
      CAPTURE(early);
      int sharing = 0; // the most ranks on one GPU (rank r runs on GPU r mod the count)
      for (int r = 0; r < world; ++r) sharing += rank_device<gpu>(r) == 0;
      const unsigned kernels = early ? 2 : 1;
      gpu_comm::config cfg;
      cfg.early_launch = early;
      // explicit slots: every one of the workers has its own, so the SM share alone bounds a call
      // (automatic slots hold fewer workers than a rank's share without early launch)
      cfg.team.slot_bytes = 64 << 10;
      basic_world<gpu> w(world, cfg);
      std::vector<unsigned> cap(world), ctas(world), capped_ctas(world);
      std::vector<int> refused(world, 0);
      std::vector<std::size_t> bad(world, 0), touched(world, 0);
      w.run([&](gpu_comm& c, int rank) {
        cap[rank] = c.block_cap();
        const unsigned k = c.block_cap();
        ctas[rank] =
            c.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float>(n).ctas;
        ark::call_options<gpu> budget;
        if (k) budget.max_ctas = static_cast<int>(k) + 5; // a budget above the cap leaves the cap
        capped_ctas[rank] =
            c.plan<ark::collective::all_reduce, ark::algo::automatic, ark::dma::automatic, float>(n, budget)
                .ctas;
        dbuf<float> d(n, rank), out(n, rank);
        d.upload(small_ints(n, rank));
        out.upload(std::vector<float>(n, -3.0f));
        if (k) { // more workers than the cap, asked for: refused before anything runs
          ark::call_options<gpu> more;
          more.workers = k + 1;
          try {
            c.all_reduce(d.get(), out.get(), n, ark::op::sum{}, more);
          } catch (const ark::invalid_argument&) {
            ++refused[rank];
          }
          try {
            c.launch(meet{}, k + 1);
          } catch (const ark::invalid_argument&) {
            ++refused[rank];
          }
          c.synchronize();
          for (float v : out.download()) touched[rank] += v != -3.0f;
          ark::call_options<gpu> exact; // the cap itself, asked for, is allowed
          exact.workers = k;
          c.all_reduce<ark::algo::one_shot, ark::dma::thread_copy<2>>(d.get(), out.get(), n, ark::op::sum{},
                                                                      exact);
          c.launch(meet{}, k);
          c.all_reduce(out.get(), out.get(), n);
        } else {
          c.all_reduce(d.get(), out.get(), n);
        }
        // back to back on the default choice: with early launch each rank's next call becomes
        // resident while its current one runs, on every rank sharing the GPU
        for (int again = 0; again < 2; ++again) c.all_reduce(out.get(), out.get(), n);
        c.synchronize();
        bad[rank] = wrong_after(out.download(), world, k ? 4 : 3);
      });
      for (int r = 0; r < world; ++r) {
        CHECK(cap[r] == cap[0]); // every rank computed the same cap
        CHECK(bad[r] == 0);
        CHECK(touched[r] == 0);
        if (sharing < 2) {
          CHECK(cap[r] == 0);
          continue;
        }
        // every rank's calls fit its GPU at once, one SM left, and one block more would not
        CHECK(cap[r] >= 1);
        CHECK(static_cast<long>(sharing) * kernels * cap[r] + 1 <= sms);
        CHECK(static_cast<long>(sharing) * kernels * (cap[r] + 1) + 1 > sms);
        CHECK(ctas[r] == cap[r]);
        CHECK(capped_ctas[r] == cap[r]);
        CHECK(refused[r] == 2);
      }
    }
}

namespace {
std::string self_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string p(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  return p.substr(0, p.rfind('/'));
}

/// Starts ark_gpu_rank processes for the given ranks; returns their exit codes. They run with
/// lazy module loading, CUDA's default since 12.2, as a user's processes do (this binary loads
/// eagerly unless CUDA_MODULE_LOADING says otherwise, see gpu_support.hpp): a first launch then
/// waits for the kernels running in its context, which deadlocked the copy-engine calls before
/// they loaded their kernels up front. `connections`: the hardware queues of each process's
/// context (CUDA_DEVICE_MAX_CONNECTIONS; 0: CUDA's default, whatever this process set).
std::vector<int> spawn_ranks(const std::vector<int>& ranks, int world, const std::string& sock,
                             int connections = 0) {
  const std::string exe = self_dir() + "/ark_gpu_rank";
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "CUDA_MODULE_LOADING=", 20) != 0 &&
        std::strncmp(*e, "CUDA_DEVICE_MAX_CONNECTIONS=", 28) != 0)
      env.push_back(*e);
  char lazy[] = "CUDA_MODULE_LOADING=LAZY";
  env.push_back(lazy);
  std::string queues = "CUDA_DEVICE_MAX_CONNECTIONS=" + std::to_string(connections);
  if (connections > 0) env.push_back(queues.data());
  env.push_back(nullptr);
  std::vector<pid_t> pids;
  for (int r : ranks) {
    std::string rs = std::to_string(r), ws = std::to_string(world);
    char* argv[] = {const_cast<char*>(exe.c_str()), rs.data(), ws.data(), const_cast<char*>(sock.c_str()),
                    nullptr};
    pid_t pid = -1;
    REQUIRE(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, env.data()) == 0);
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  }
  return codes;
}
} // namespace

// On a machine with one GPU the processes share it (their contexts take turns on it): the IPC
// handles and the protocol are the same, the link is not crossed.
TEST_CASE("gpu: one process per rank, IPC handles exchanged through the Unix-socket bootstrap" *
          needs_gpus(1)) {
  const int world = gpu_ranks();
  const std::string sock = "/tmp/ark-gpu-" + std::to_string(::getpid()) + ".sock";
  std::vector<int> all;
  for (int r = 0; r < world; ++r) all.push_back(r);
  SUBCASE("every rank correct") {
    const auto codes = spawn_ranks(all, world, sock);
    for (int r = 0; r < world; ++r) CHECK_MESSAGE(codes[r] == 0, "rank " << r << " exited with " << codes[r]);
  }
  SUBCASE("a rank that never starts: the others time out, exit code 2") {
    const auto alone = spawn_ranks({0}, world, sock + ".alone");
    CHECK(alone[0] == 2);
  }
  // Megatron-LM's setting: every stream of a context shares one queue, which runs their steps in
  // the order they were enqueued. The copy-engine all-reduce launched a wait for the peers'
  // `ready` before its own `ready` writes and timed out so (docs/perf.md, run bs).
  SUBCASE("every stream of a rank on one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1)") {
    const auto one_queue = spawn_ranks(all, world, sock + ".one-queue", 1);
    for (int r = 0; r < world; ++r)
      CHECK_MESSAGE(one_queue[r] == 0, "rank " << r << " exited with " << one_queue[r]);
  }
}
