// fp16 and bf16 storage: exact round trips, round-to-nearest-even, specials.
#include "ark/core/dtype.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace {
float bits_to_float(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
} // namespace

TEST_CASE("fp16: every non-NaN bit pattern survives float and back") {
  int checked = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const ark::fp16 h = ark::fp16::from_bits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(h);
    if (std::isnan(f)) {
      CHECK(std::isnan(static_cast<float>(ark::fp16(f))));
      continue;
    }
    REQUIRE(ark::fp16(f).bits == b);
    ++checked;
  }
  CHECK(checked == 65536 - 2046); // 2 * (2^10 - 1) NaN patterns
}

TEST_CASE("fp16: values, rounding to nearest even, overflow, subnormals") {
  CHECK(static_cast<float>(ark::fp16(1.0f)) == 1.0f);
  CHECK(ark::fp16(1.0f).bits == 0x3c00);
  CHECK(ark::fp16(-2.0f).bits == 0xc000);
  CHECK(ark::fp16(65504.0f).bits == 0x7bff); // largest finite
  CHECK(ark::fp16(65520.0f).bits == 0x7c00); // rounds to infinity
  CHECK(ark::fp16(1e-8f).bits == 0x0000);    // below half the smallest subnormal
  CHECK(ark::fp16(std::ldexp(1.0f, -24)).bits == 0x0001);
  CHECK(static_cast<float>(ark::fp16::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  // halfway between 1 and the next fp16 (1 + 2^-10): ties go to the even mantissa
  CHECK(ark::fp16(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);
  CHECK(ark::fp16(1.0f + 3 * std::ldexp(1.0f, -11)).bits == 0x3c02);
  CHECK(ark::fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)).bits == 0x3c01);
  CHECK(std::isinf(static_cast<float>(ark::fp16(std::numeric_limits<float>::infinity()))));
}

TEST_CASE("bf16: round trips, rounding to nearest even, NaN stays NaN") {
  for (std::uint32_t b = 0; b < 65536; b += 7) {
    const float f = static_cast<float>(ark::bf16::from_bits(static_cast<std::uint16_t>(b)));
    if (!std::isnan(f)) REQUIRE(ark::bf16(f).bits == b);
  }
  CHECK(ark::bf16(1.0f).bits == 0x3f80);
  CHECK(ark::bf16(bits_to_float(0x3f808000)).bits == 0x3f80); // tie, even stays
  CHECK(ark::bf16(bits_to_float(0x3f818000)).bits == 0x3f82); // tie, odd rounds up
  CHECK(ark::bf16(bits_to_float(0x3f808001)).bits == 0x3f81);
  CHECK(std::isnan(static_cast<float>(ark::bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("dtype traits: names, sizes, accumulation types") {
  CHECK(ark::dtype_of<ark::fp16> == ark::dtype::f16);
  CHECK(ark::size_of(ark::dtype::f64) == 8);
  CHECK(std::string(ark::to_string(ark::dtype::bf16)) == "bf16");
  CHECK(std::is_same_v<ark::acc_t<ark::bf16>, float>);
  CHECK(std::is_same_v<ark::acc_t<std::uint8_t>, std::uint8_t>);
  CHECK(!ark::element<char>);
}
