// Reduce-scatter over thread copies: direct and ring x op x dtype x world x depth x size.
#include "../support/collective_check.hpp"

using namespace ark_test;

TEST_CASE_TEMPLATE("reduce_scatter/thread_copy: every algorithm, op, world, depth and size", T, float, double,
                   ark::fp16, ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::reduce_scatter, T>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                 all_depths<ark::dma::thread_copy>{}, all_ops{});
}
