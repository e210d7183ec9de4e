// The concepts accept ark's models and reject what does not fit; which algorithm implements which
// collective. All compile-time facts: this file checks them by compiling (no test case runs here).
#include "ark/ark.hpp"

#include <type_traits>

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

// models satisfy the concepts, impostors do not
static_assert(ark::device<ark::platform::host>);
static_assert(!ark::device<no_atomics>);
static_assert(ark::scope<ark::host_team>);
static_assert(ark::scope<ark::single_thread_scope>);
static_assert(!ark::scope<bad_scope>);
static_assert(ark::dma_backend<ark::dma::thread_copy<1>>);
static_assert(ark::dma_backend<ark::dma::ll_packet<4>>);
static_assert(ark::dma_backend<ark::dma::proxy_engine<8>>);
static_assert(!ark::dma_backend<no_tag_backend>);
static_assert(!ark::dma_backend<ark::dma::automatic>);
static_assert(ark::bootstrap<ark::in_process_bootstrap>);
static_assert(!ark::bootstrap<lonely_bootstrap>);
static_assert(ark::reduce_op<ark::op::avg, ark::bf16>);
static_assert(!ark::reduce_op<int, float>);
// what kernels receive by value
static_assert(std::is_trivially_copyable_v<ark::device_comm<ark::platform::host>>);
static_assert(std::is_trivially_copyable_v<ark::window_view>);

// which algorithm implements which collective
static_assert(ark::algorithms::implements<ark::collective::all_reduce, ark::algo::ring>);
static_assert(ark::algorithms::implements<ark::collective::all_gather, ark::algo::direct>);
static_assert(!ark::algorithms::implements<ark::collective::all_reduce, ark::algo::direct>);
static_assert(!ark::algorithms::implements<ark::collective::broadcast, ark::algo::ring>);
