// The default choice (collectives/select.hpp): the algorithm and LL path by size and world, and
// the worker count by size.
#include "ark/ark.hpp"

#include <doctest/doctest.h>

TEST_CASE("select: the algorithm, LL path and worker count by size and world") {
  using ark::collective;
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
