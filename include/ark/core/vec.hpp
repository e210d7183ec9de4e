// ark/core/vec.hpp: the units data moves in, and their view as lanes of elements.
#pragma once

#include "ark/config.hpp"
#include "ark/core/dtype.hpp"
#include "ark/core/float16.hpp"

#include <cstddef>
#include <cstdint>

namespace ark {

/// V raw bytes moved as one unit (8 or 16): one vector load or store, or the data of one LL packet.
template <std::size_t V>
struct alignas(V) vec {
  static_assert(V == 8 || V == 16, "ark moves data in 8- or 16-byte vectors");
  std::uint64_t w[V / 8];
};

/// A vector seen as V / sizeof(T) elements of T.
template <class T, std::size_t V>
struct lanes {
  static constexpr std::size_t n = V / sizeof(T);
  static_assert(n >= 1, "element type larger than the vector");
  T v[n];
};

/// The same lanes in the accumulation type of T.
template <class T, std::size_t V>
struct acc_lanes {
  static constexpr std::size_t n = V / sizeof(T);
  acc_t<T> v[n];
};

template <class T, std::size_t V>
ARK_HD ARK_FORCEINLINE lanes<T, V> as_lanes(const vec<V>& x) {
  return detail::bit_cast<lanes<T, V>>(x);
}

template <class T, std::size_t V>
ARK_HD ARK_FORCEINLINE vec<V> as_vec(const lanes<T, V>& x) {
  return detail::bit_cast<vec<V>>(x);
}

} // namespace ark
