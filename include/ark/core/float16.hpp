// ark/core/float16.hpp: 16-bit floating-point storage types shared by host and device code.
//
// `fp16` (IEEE binary16) and `bf16` (bfloat16) store 16 bits and convert to and from float with
// round-to-nearest-even. Arithmetic happens in float: ark accumulates 16-bit values in fp32. The
// conversions are plain integer code, so the host backend and the GPUs round identically.
#pragma once

#include "ark/config.hpp"

#include <cstdint>

namespace ark {
namespace detail {

template <class To, class From>
ARK_HD ARK_FORCEINLINE To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  __builtin_memcpy(&to, &from, sizeof(To));
  return to;
}

ARK_HD inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t e = (x >> 23) & 0xffu;
  std::uint32_t m = x & 0x7fffffu;
  if (e == 0xffu) return static_cast<std::uint16_t>(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0u));
  const int exp = static_cast<int>(e) - 127 + 15;
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (exp <= 0) { // a half subnormal, or zero
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    m |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t hm = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (hm & 1u))) ++hm;
    return static_cast<std::uint16_t>(sign | hm);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(exp) << 10) | (m >> 13);
  const std::uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h; // a carry may round up to infinity: correct
  return static_cast<std::uint16_t>(h);
}

ARK_HD inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  std::uint32_t bits;
  if (e == 0x1fu) {
    bits = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else { // normalise a subnormal
      int shift = 0;
      while (!(m & 0x400u)) {
        m <<= 1;
        ++shift;
      }
      bits = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  return bit_cast<float>(bits);
}

ARK_HD inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t x = bit_cast<std::uint32_t>(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

ARK_HD inline float bf16_bits_to_float(std::uint16_t b) {
  return bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

} // namespace detail

/// IEEE 754 binary16 storage.
struct fp16 {
  std::uint16_t bits;
  fp16() = default;
  ARK_HD explicit fp16(float f) : bits(detail::float_to_half_bits(f)) {}
  ARK_HD explicit operator float() const { return detail::half_bits_to_float(bits); }
  ARK_HD static fp16 from_bits(std::uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }
};

/// bfloat16 storage (the upper half of an IEEE binary32).
struct bf16 {
  std::uint16_t bits;
  bf16() = default;
  ARK_HD explicit bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  ARK_HD explicit operator float() const { return detail::bf16_bits_to_float(bits); }
  ARK_HD static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(fp16) == 2 && sizeof(bf16) == 2);

} // namespace ark
