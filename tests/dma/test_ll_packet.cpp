// LL packets: every collective and algorithm x depth x dtype over the LL backend, every op once.
#include "../support/collective_check.hpp"

using namespace ark_test;

using ll_depths = all_depths<ark::dma::ll_packet>;

TEST_CASE_TEMPLATE("ll_packet: all_reduce, every algorithm, depth, dtype, world and size", T, float, double,
                   ark::fp16, ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  run_matrix<ark::collective::all_reduce, T>(
      type_list<ark::algo::one_shot, ark::algo::two_shot, ark::algo::ring>{}, ll_depths{},
      type_list<ark::op::sum>{});
}

TEST_CASE("ll_packet: every op, and every other collective") {
  run_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::one_shot, ark::algo::ring>{},
                                                 type_list<ark::dma::ll_packet<2>>{}, all_ops{});
  run_matrix<ark::collective::reduce_scatter, std::int32_t>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                            ll_depths{}, type_list<ark::op::max>{});
  run_matrix<ark::collective::all_gather, ark::fp16>(type_list<ark::algo::direct, ark::algo::ring>{},
                                                     ll_depths{}, type_list<ark::op::sum>{});
  run_matrix<ark::collective::broadcast, std::uint8_t>(type_list<ark::algo::direct>{}, ll_depths{},
                                                       type_list<ark::op::sum>{});
  run_matrix<ark::collective::reduce, double>(type_list<ark::algo::direct>{}, ll_depths{},
                                              type_list<ark::op::prod>{});
}
