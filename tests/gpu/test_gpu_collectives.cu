// Reduce-scatter, all-gather, broadcast, reduce and all-to-all on GPUs, over both SM backends.
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
