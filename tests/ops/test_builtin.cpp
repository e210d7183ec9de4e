// The built-in ops: integer wrap-around without undefined behaviour, avg's finalize, min/max.
#include "ark/ops/builtin.hpp"
#include "ark/ops/dynamic.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

TEST_CASE("ops: integer sum and prod wrap around") {
  const std::int32_t big = std::numeric_limits<std::int32_t>::max();
  CHECK(ark::op::sum{}(big, std::int32_t{1}) == std::numeric_limits<std::int32_t>::min());
  CHECK(ark::op::prod{}(std::int32_t{65536}, std::int32_t{65536}) == 0);
  CHECK(ark::op::sum{}(std::uint8_t{200}, std::uint8_t{100}) == 44);
  CHECK(ark::op::prod{}(std::uint8_t{16}, std::uint8_t{17}) == 16);
  CHECK(ark::op::prod{}(std::int64_t{-3}, std::int64_t{5}) == -15);
}

TEST_CASE("ops: min, max, avg") {
  CHECK(ark::op::min{}(2.0f, -1.0f) == -1.0f);
  CHECK(ark::op::max{}(std::int64_t{-5}, std::int64_t{3}) == 3);
  CHECK(ark::op::avg{}(3.0, 5.0) == 8.0);
  CHECK(ark::op::avg{}.finalize(9.0, 4) == 2.25);
  CHECK(ark::op::avg{}.finalize(std::int32_t{-9}, 4) == -2);
  CHECK(ark::op_id<ark::op::avg> == 4);
}

TEST_CASE("ops: dynamic chooses each built-in op at run time, premul_sum scales once") {
  using ark::op::dynamic;
  using K = dynamic::kind;
  CHECK(dynamic{K::sum}(std::uint8_t{200}, std::uint8_t{100}) == 44);
  CHECK(dynamic{K::prod}(std::int32_t{65536}, std::int32_t{65536}) == 0);
  CHECK(dynamic{K::min}(2.0f, -1.0f) == -1.0f);
  CHECK(dynamic{K::max}(std::int64_t{-5}, std::int64_t{3}) == 3);
  CHECK(dynamic{K::avg}(3.0, 5.0) == 8.0);
  CHECK(dynamic{K::avg}.finalize(std::int32_t{-9}, 4) == -2);
  CHECK(dynamic{K::max}.finalize(7.0, 4) == 7.0);
  dynamic pre{K::premul_sum, 0.5};
  CHECK(pre(3.0f, 5.0f) == 8.0f);
  CHECK(pre.finalize(8.0f, 4) == 4.0f);
  const float in_memory = 3.0f;
  pre.scale_at = &in_memory;
  pre.scale_type = ark::dtype::f32;
  CHECK(pre.finalize(8.0f, 4) == 24.0f);
  const ark::fp16 half_factor(2.0f);
  pre.scale_at = &half_factor;
  pre.scale_type = ark::dtype::f16;
  CHECK(pre.finalize(std::int32_t{-7}, 4) == -14);
  CHECK(ark::op_id<dynamic> == 0xff); // ranks do not compare a run-time choice
}
