// All-reduce over thread copies, integer types (exact results): the same matrix as the floats.
#include "../support/collective_check.hpp"

using namespace ark_test;

TEST_CASE_TEMPLATE("all_reduce/thread_copy: every algorithm, op, world, depth and size", T, std::int32_t,
                   std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::all_reduce, T>(
      type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>{},
      all_depths<ark::dma::thread_copy>{}, all_ops{});
}

TEST_CASE("all_reduce: int8, every op, over thread copies and LL packets") {
  run_matrix<ark::collective::all_reduce, std::int8_t>(
      type_list<ark::algo::one_shot, ark::algo::ring>{},
      type_list<ark::dma::thread_copy<2>, ark::dma::ll_packet<4>>{}, all_ops{});
}

TEST_CASE("all_reduce/thread_copy: teams of several threads per worker") {
  for (unsigned threads : {2u, 3u})
    for (int world : {2, 3}) {
      test_world w(world, small_config(threads));
      for (std::size_t count : matrix_sizes()) {
        const case_params p{count, 0, false, 7};
        check_collective<ark::collective::all_reduce, std::int32_t, ark::op::sum>(
            w, p,
            make_callee<ark::collective::all_reduce, ark::algo::one_shot, ark::dma::thread_copy<2>,
                        std::int32_t, ark::op::sum>());
        check_collective<ark::collective::all_reduce, std::int32_t, ark::op::sum>(
            w, p,
            make_callee<ark::collective::all_reduce, ark::algo::two_shot, ark::dma::ll_packet<2>,
                        std::int32_t, ark::op::sum>());
        check_collective<ark::collective::all_reduce, std::int32_t, ark::op::sum>(
            w, p,
            make_callee<ark::collective::all_reduce, ark::algo::ring, ark::dma::proxy_engine<2>, std::int32_t,
                        ark::op::sum>());
      }
    }
}
