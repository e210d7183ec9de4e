// All-reduce on GPUs against the host reference, one rank alone and several (sharing a GPU on
// a one-GPU machine), in place and not, over every size class. Each dimension is covered in
// full: every algorithm x depth (thread copies), every depth (LL packets), every op, every dtype,
// the automatic choice, and algo::one_step.
#include "gpu_support.hpp"

using namespace ark_test;

using all_reduce_algos = type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>;
using sum_only = type_list<ark::op::sum>;

TEST_CASE("gpu all_reduce: every algorithm and depth over thread copies" * needs_gpus(1)) {
  gpu_matrix<ark::collective::all_reduce, float>(all_reduce_algos{}, all_depths<ark::dma::thread_copy>{},
                                                 sum_only{});
}

TEST_CASE("gpu all_reduce: LL packets, every depth and every algorithm" * needs_gpus(1)) {
  gpu_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::one_shot>{},
                                                 all_depths<ark::dma::ll_packet>{}, sum_only{});
  gpu_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::two_shot>{},
                                                 type_list<ark::dma::ll_packet<2>>{}, sum_only{});
  gpu_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::ring>{},
                                                 type_list<ark::dma::ll_packet<8>>{}, sum_only{});
}

// algo::one_step launched from the host: sizes whose every worker's share fits one LL step
// (gpu_small_config: 256 threads, 512 floats a worker, a worker per 2 KB: up to 8 workers)
TEST_CASE("gpu all_reduce: algo::one_step, every depth and op" * needs_gpus(1)) {
  const std::vector<std::size_t> fit{0, 1, 7, 67, 1000, 3001};
  run_matrix<ark::collective::all_reduce, float, gpu>(type_list<ark::algo::one_step>{},
                                                      all_depths<ark::dma::ll_packet>{}, sum_only{},
                                                      gpu_small_config(), gpu_worlds(), fit);
  run_matrix<ark::collective::all_reduce, float, gpu>(type_list<ark::algo::one_step>{},
                                                      type_list<ark::dma::ll_packet<4>>{}, all_ops{},
                                                      gpu_small_config(), gpu_worlds(), fit);
}

TEST_CASE("gpu all_reduce: every op" * needs_gpus(1)) {
  gpu_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::one_shot>{},
                                                 type_list<ark::dma::ll_packet<4>>{}, all_ops{});
  gpu_matrix<ark::collective::all_reduce, std::int32_t>(type_list<ark::algo::one_shot>{},
                                                        type_list<ark::dma::ll_packet<4>>{}, all_ops{});
  gpu_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::two_shot>{},
                                                 type_list<ark::dma::thread_copy<2>>{}, all_ops{});
}

namespace {
template <class T>
void dtype_case() {
  gpu_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_shot>{},
                                             type_list<ark::dma::ll_packet<4>>{}, sum_only{});
  gpu_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::ring>{},
                                             type_list<ark::dma::thread_copy<4>>{}, sum_only{});
}
} // namespace

TEST_CASE("gpu all_reduce: every dtype (fp16 and bf16 accumulate in fp32)" * needs_gpus(1)) {
  SUBCASE("double") { dtype_case<double>(); }
  SUBCASE("fp16") { dtype_case<ark::fp16>(); }
  SUBCASE("bf16") { dtype_case<ark::bf16>(); }
  SUBCASE("int64") { dtype_case<std::int64_t>(); }
  SUBCASE("uint8") { dtype_case<std::uint8_t>(); }
}

TEST_CASE("gpu all_reduce: the automatic choice of algorithm and backend" * needs_gpus(1)) {
  gpu_matrix<ark::collective::all_reduce, ark::bf16>(
      type_list<ark::algo::automatic>{}, type_list<ark::dma::automatic>{}, type_list<ark::op::avg>{});
}
