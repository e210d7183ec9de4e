// ark/team/symmetric.hpp: a buffer that every rank registered at the same place, as a kernel
// sees it. Zero-copy algorithms (algorithms/zero_copy.hpp) read the peers' copies of such a
// buffer in place, with no staging through the scratch slots.
#pragma once

#include "ark/config.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ark {

/// `T` elements at the same place of one registered buffer (a window) on every rank: the same
/// registration (its serial, which registrations share on every rank: they are collective) and
/// the same offset in it. `bases` is the window's table: where rank r's copy of the window lies
/// in this rank's address space, one entry per rank, in memory kernels read (the registry's; it
/// lives as long as the registration). Trivially copyable: pass it to kernels by value.
template <class T>
struct symmetric {
  T* local = nullptr;
  const std::uintptr_t* bases = nullptr;
  /// serial << place_shift | offset in bytes: equal on every rank for symmetric buffers. The
  /// zero-copy handshake compares it, so a rank whose buffer lies elsewhere is a mismatch error,
  /// never a read at the wrong place.
  std::uint64_t place = 0;

  static constexpr unsigned place_shift = 48;
  static constexpr std::uint64_t offset_mask = (std::uint64_t{1} << place_shift) - 1;

  /// Rank r's copy, in this rank's address space.
  ARK_HD T* on(int r) const { return reinterpret_cast<T*>(bases[r] + (place & offset_mask)); }
  /// The same buffer from `n` elements on (a block, a worker's share).
  ARK_HD symmetric operator+(std::size_t n) const { return {local + n, bases, place + n * sizeof(T)}; }
  /// The read-only view of the same buffer (a template, so that symmetric<const T> declares no
  /// conversion to itself).
  template <class U = T>
  requires(!std::is_const_v<U>) ARK_HD operator symmetric<const U>() const { return {local, bases, place}; }
};

static_assert(std::is_trivially_copyable_v<symmetric<float>>);

} // namespace ark
