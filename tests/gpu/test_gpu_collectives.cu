// Reduce-scatter, all-gather, broadcast, reduce, all-to-all, gather and scatter on GPUs, over both SM
// backends.
#include "gpu_support.hpp"

using namespace ark_test;

using sm_backends = type_list<ark::dma::thread_copy<4>, ark::dma::ll_packet<2>>;
using direct_and_ring = type_list<ark::algo::direct, ark::algo::ring>;

TEST_CASE("gpu reduce_scatter: direct and ring, both backends" * needs_gpus(1)) {
  gpu_matrix<ark::collective::reduce_scatter, float>(direct_and_ring{}, sm_backends{},
                                                     type_list<ark::op::sum>{});
  gpu_matrix<ark::collective::reduce_scatter, std::int32_t>(
      type_list<ark::algo::direct>{}, type_list<ark::dma::thread_copy<1>>{}, type_list<ark::op::max>{});
}

TEST_CASE("gpu all_gather: direct and ring, both backends" * needs_gpus(1)) {
  gpu_matrix<ark::collective::all_gather, ark::fp16>(direct_and_ring{}, sm_backends{},
                                                     type_list<ark::op::sum>{});
}

TEST_CASE("gpu broadcast and reduce: both backends, every root" * needs_gpus(1)) {
  gpu_matrix<ark::collective::broadcast, double>(type_list<ark::algo::direct>{}, sm_backends{},
                                                 type_list<ark::op::sum>{});
  gpu_matrix<ark::collective::reduce, std::int64_t>(type_list<ark::algo::direct>{}, sm_backends{},
                                                    type_list<ark::op::prod>{});
}

TEST_CASE("gpu all_to_all: direct, both backends" * needs_gpus(1)) {
  gpu_matrix<ark::collective::all_to_all, float>(type_list<ark::algo::direct>{}, sm_backends{},
                                                 type_list<ark::op::sum>{});
}

TEST_CASE("gpu gather and scatter: direct, both backends, every root" * needs_gpus(1)) {
  gpu_matrix<ark::collective::gather, std::int32_t>(type_list<ark::algo::direct>{}, sm_backends{},
                                                    type_list<ark::op::sum>{});
  gpu_matrix<ark::collective::scatter, ark::bf16>(type_list<ark::algo::direct>{}, sm_backends{},
                                                  type_list<ark::op::sum>{});
}

namespace {
/// One ring shift and one all_to_allv of uneven counts (zeros included) over backend B on a GPU
/// rank; returns the wrong elements (outputs poisoned first, a guard after them).
template <class B>
std::size_t p2p_wrong(gpu_comm& c, int rank, std::size_t n) {
  const int world = c.world();
  auto val = [](int from, int to, std::size_t i) {
    return static_cast<float>((from * 13 + to * 7 + i % 89) % 97);
  };
  std::size_t bad = 0;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  std::vector<float> h(n), got(n + 64, -1.0f);
  for (std::size_t i = 0; i < n; ++i) h[i] = val(rank, next, i);
  platform_buffer<gpu> in(n * sizeof(float), rank), out(got.size() * sizeof(float), rank);
  gpu::copy(in.as<float>(), h.data(), n * sizeof(float));
  gpu::copy(out.as<float>(), got.data(), got.size() * sizeof(float));
  c.group_start();
  c.recv<B>(out.as<float>(), n, prev);
  c.send<B>(in.as<const float>(), n, next);
  c.group_end();
  c.synchronize();
  gpu::copy(got.data(), out.as<float>(), got.size() * sizeof(float));
  for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != (i < n ? val(prev, rank, i) : -1.0f);
  // all pairs, uneven
  std::vector<std::size_t> sc(world), so(world), rc(world), ro(world);
  std::size_t ns = 0, nr = 0;
  for (int p = 0; p < world; ++p) {
    sc[p] = ((rank * 3 + p * 5) % 4) * n, so[p] = ns, ns += sc[p];
    rc[p] = ((p * 3 + rank * 5) % 4) * n, ro[p] = nr, nr += rc[p];
  }
  std::vector<float> hs(ns), hr(nr + 64, -1.0f);
  for (int p = 0; p < world; ++p)
    for (std::size_t i = 0; i < sc[p]; ++i) hs[so[p] + i] = val(rank, p, i);
  platform_buffer<gpu> s(ns * sizeof(float) + 16, rank), r(hr.size() * sizeof(float), rank);
  gpu::copy(s.as<float>(), hs.data(), ns * sizeof(float));
  gpu::copy(r.as<float>(), hr.data(), hr.size() * sizeof(float));
  c.all_to_allv<B>(s.as<const float>(), sc.data(), so.data(), r.as<float>(), rc.data(), ro.data());
  c.synchronize();
  gpu::copy(hr.data(), r.as<float>(), hr.size() * sizeof(float));
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < rc[q]; ++i) bad += hr[ro[q] + i] != val(q, rank, i);
  for (std::size_t i = nr; i < hr.size(); ++i) bad += hr[i] != -1.0f;
  return bad;
}
} // namespace

TEST_CASE("gpu zero-copy: all_reduce, reduce_scatter, all_gather over registered buffers, named and "
          "automatic, in place and not" *
          needs_gpus(1)) {
  gpu_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::zero_copy, ark::algo::automatic>{},
                                                 type_list<ark::dma::automatic>{}, type_list<ark::op::sum>{},
                                                 true);
  gpu_matrix<ark::collective::reduce_scatter, std::int32_t>(type_list<ark::algo::zero_copy>{},
                                                            type_list<ark::dma::thread_copy<1>>{},
                                                            type_list<ark::op::max>{}, true);
  gpu_matrix<ark::collective::all_gather, ark::fp16>(type_list<ark::algo::zero_copy>{},
                                                     type_list<ark::dma::thread_copy<2>>{},
                                                     type_list<ark::op::sum>{}, true);
}

TEST_CASE("gpu send/recv: a ring shift and all_to_allv of uneven counts, both SM backends" * needs_gpus(1)) {
  for (int world : gpu_worlds()) {
    CAPTURE(world);
    basic_world<gpu> w(world, gpu_small_config());
    std::vector<std::size_t> bad(world, 0);
    w.run([&](gpu_comm& c, int rank) {
      for (std::size_t n : {0, 1, 1000, 100000}) {
        bad[rank] += p2p_wrong<ark::dma::thread_copy<4>>(c, rank, n);
        bad[rank] += p2p_wrong<ark::dma::ll_packet<2>>(c, rank, n);
        bad[rank] += p2p_wrong<ark::dma::automatic>(c, rank, n);
      }
    });
    for (int r = 0; r < world; ++r) CHECK(bad[r] == 0);
  }
}
