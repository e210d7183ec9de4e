// All-reduce over thread copies, floating-point types: every algorithm x op x world (1, 2, 3, 4, 8)
// x depth (1, 2, 4, 8) x size (0, 1, odd, not a multiple of a slot, several slots), in place and not.
#include "../support/collective_check.hpp"

using namespace ark_test;

TEST_CASE_TEMPLATE("all_reduce/thread_copy: every algorithm, op, world, depth and size", T, float, double,
                   ark::fp16, ark::bf16) {
  run_matrix<ark::collective::all_reduce, T>(
      type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>{},
      all_depths<ark::dma::thread_copy>{}, all_ops{});
}
