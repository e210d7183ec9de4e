// All-gather, broadcast and reduce over thread copies: every algorithm x dtype x world x depth x
// size (and x op for reduce), roots varying with the size.
#include "../support/collective_check.hpp"

using namespace ark_test;

TEST_CASE_TEMPLATE("all_gather/thread_copy: every algorithm, world, depth and size", T, float, double,
                   ark::fp16, ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::all_gather, T>(type_list<ark::algo::direct, ark::algo::ring>{},
                                             all_depths<ark::dma::thread_copy>{}, type_list<ark::op::sum>{});
}

TEST_CASE_TEMPLATE("broadcast/thread_copy: every world, depth, root and size", T, float, double, ark::fp16,
                   ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::broadcast, T>(type_list<ark::algo::direct>{},
                                            all_depths<ark::dma::thread_copy>{}, type_list<ark::op::sum>{});
}

TEST_CASE_TEMPLATE("reduce/thread_copy: every op, world, depth, root and size", T, float, double, ark::fp16,
                   ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::reduce, T>(type_list<ark::algo::direct>{}, all_depths<ark::dma::thread_copy>{},
                                         all_ops{});
}
