// The concepts accept ark's models and reject what does not fit.
#include "ark/ark.hpp"

#include <doctest/doctest.h>

namespace {
struct no_atomics {
  static constexpr const char* name = "broken";
};
struct bad_scope {
  int thread_rank() const { return 0; } // int, not unsigned
  unsigned size() const { return 1; }
  void sync() {}
  bool sync_any(bool p) { return p; }
};
struct no_tag_backend : ark::dma::thread_copy<2> {
  using dma_concept = void;
};
struct lonely_bootstrap {
  int rank() const { return 0; }
};
} // namespace

TEST_CASE("concepts: models satisfy them, impostors do not") {
  CHECK(ark::device<ark::platform::host>);
  CHECK_FALSE(ark::device<no_atomics>);
  CHECK(ark::scope<ark::host_team>);
  CHECK(ark::scope<ark::single_thread_scope>);
  CHECK_FALSE(ark::scope<bad_scope>);
  CHECK(ark::dma_backend<ark::dma::thread_copy<1>>);
  CHECK(ark::dma_backend<ark::dma::ll_packet<4>>);
  CHECK(ark::dma_backend<ark::dma::proxy_engine<8>>);
  CHECK_FALSE(ark::dma_backend<no_tag_backend>);
  CHECK_FALSE(ark::dma_backend<ark::dma::automatic>);
  CHECK(ark::bootstrap<ark::in_process_bootstrap>);
  CHECK_FALSE(ark::bootstrap<lonely_bootstrap>);
  CHECK(ark::reduce_op<ark::op::avg, ark::bf16>);
  CHECK_FALSE(ark::reduce_op<int, float>);
  CHECK(std::is_trivially_copyable_v<ark::device_comm<ark::platform::host>>);
  CHECK(std::is_trivially_copyable_v<ark::window_view>);
}

TEST_CASE("algorithms: which algorithm implements which collective") {
  using ark::collective;
  CHECK(ark::algorithms::implements<collective::all_reduce, ark::algo::ring>);
  CHECK(ark::algorithms::implements<collective::all_gather, ark::algo::direct>);
  CHECK_FALSE(ark::algorithms::implements<collective::all_reduce, ark::algo::direct>);
  CHECK_FALSE(ark::algorithms::implements<collective::broadcast, ark::algo::ring>);
  ark::tuning t;
  CHECK(ark::select(collective::all_reduce, 8, 4, t).algorithm == ark::algo::one_shot::id);
  CHECK(ark::select(collective::all_reduce, 8, 4, t).ll);
  CHECK(ark::select(collective::all_reduce, 64 << 20, 4, t).algorithm == ark::algo::two_shot::id);
  CHECK(ark::select(collective::all_reduce, 64 << 20, 16, t).algorithm == ark::algo::ring::id);
  CHECK_FALSE(ark::select(collective::all_reduce, 64 << 20, 2, t).ll);
  CHECK(ark::select_workers(0, 8, t, false) == 1);
  CHECK(ark::select_workers(t.bytes_per_worker * 3 + 1, 8, t, false) == 4);
  CHECK(ark::select_workers(t.ll_bytes_per_worker * 2, 8, t, true) == 2);
  CHECK(ark::select_workers(std::size_t(1) << 40, 8, t, false) == 8);
}
