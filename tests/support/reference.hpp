// tests/support/reference.hpp: inputs as a pure function of (seed, rank, index), the exact
// reference of a reduction, and the check of a result against it; shared by the doctest suites
// (support/harness.hpp) and the soak (tests/soak/), which has no doctest.
#pragma once

#include "ark/ark.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace ark_test {

/// Elements of a rank's input and output of collective k on `count` elements per rank.
/// (gather's output and scatter's input: the root's; the other ranks' are not used.)
inline std::size_t in_elems(ark::collective k, std::size_t count, int world) {
  return k == ark::collective::reduce_scatter || k == ark::collective::all_to_all ||
                 k == ark::collective::scatter
             ? count * world
             : count;
}
inline std::size_t out_elems(ark::collective k, std::size_t count, int world) {
  return k == ark::collective::all_gather || k == ark::collective::all_to_all || k == ark::collective::gather
             ? count * world
             : count;
}

// -- inputs ---------------------------------------------------------------------------------------
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
inline constexpr bool is_float =
    std::is_floating_point_v<T> || std::is_same_v<T, ark::fp16> || std::is_same_v<T, ark::bf16>;

/// Input element i of rank r: small integers, or floats whose range suits the op.
template <class T, class Op>
T input(std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t h = mix(seed * 1000003u + static_cast<std::uint64_t>(rank) * 7919u + mix(i));
  const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0); // [0, 1)
  if constexpr (is_float<T>) {
    const double v = std::is_same_v<Op, ark::op::prod> ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
    return static_cast<T>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Op, ark::op::prod>) {
    return static_cast<T>(static_cast<int>(h % 7) - (std::is_signed_v<T> ? 3 : 0));
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {
    return static_cast<T>(h % 32);
  } else {
    return static_cast<T>(static_cast<std::int64_t>(h % 2001) - 1000);
  }
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, ark::fp16> || std::is_same_v<T, ark::bf16>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}

/// Unit roundoff of T's arithmetic (fp16/bf16 are stored, not computed, in 16 bits).
template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, ark::fp16>)
    return std::ldexp(1.0, -11);
  else if constexpr (std::is_same_v<T, ark::bf16>)
    return std::ldexp(1.0, -8);
  else if constexpr (std::is_same_v<T, float>)
    return std::ldexp(1.0, -24);
  else
    return std::ldexp(1.0, -53);
}

/// The exact result of reducing `values` (rank order) with Op: integer ops wrap like ark's.
template <class T, class Op>
struct reference {
  double value = 0;     // floats: the exact (double) result
  double magnitude = 0; // floats: the bound's scale
  T exact{};            // integers, and min/max of floats: the exact T result
};

template <class T, class Op>
reference<T, Op> reduce_reference(const std::vector<T>& values) {
  reference<T, Op> ref;
  const int n = static_cast<int>(values.size());
  if constexpr (is_float<T>) {
    double acc = as_double(values[0]), mag = std::fabs(acc);
    T best = values[0];
    for (int r = 1; r < n; ++r) {
      const double v = as_double(values[r]);
      if constexpr (std::is_same_v<Op, ark::op::prod>)
        acc *= v;
      else
        acc += v;
      mag += std::fabs(v);
      if constexpr (std::is_same_v<Op, ark::op::min>) best = v < as_double(best) ? values[r] : best;
      if constexpr (std::is_same_v<Op, ark::op::max>) best = v > as_double(best) ? values[r] : best;
    }
    if constexpr (std::is_same_v<Op, ark::op::avg>) acc /= n, mag /= n;
    if constexpr (std::is_same_v<Op, ark::op::prod>) mag = std::fabs(acc);
    ref.value = acc, ref.magnitude = mag, ref.exact = best;
  } else {
    using U = std::make_unsigned_t<std::conditional_t<std::is_same_v<T, std::uint8_t>, std::uint64_t, T>>;
    U acc = static_cast<U>(values[0]);
    T best = values[0];
    for (int r = 1; r < n; ++r) {
      if constexpr (std::is_same_v<Op, ark::op::prod>)
        acc = static_cast<U>(acc * static_cast<U>(values[r]));
      else
        acc = static_cast<U>(acc + static_cast<U>(values[r]));
      best = std::is_same_v<Op, ark::op::min> ? std::min(best, values[r]) : std::max(best, values[r]);
    }
    if constexpr (std::is_same_v<Op, ark::op::min> || std::is_same_v<Op, ark::op::max>)
      ref.exact = best;
    else if constexpr (std::is_same_v<Op, ark::op::avg>)
      ref.exact = static_cast<T>(static_cast<T>(acc) / static_cast<T>(n));
    else
      ref.exact = static_cast<T>(acc);
  }
  return ref;
}

/// Whether `got` matches the reference: exact for integers and min/max; for floats within
/// 2 * world * u * magnitude (u: T's unit roundoff), the bound of `world` roundings.
template <class T, class Op>
bool matches(T got, const reference<T, Op>& ref, int world) {
  if constexpr (!is_float<T> || std::is_same_v<Op, ark::op::min> || std::is_same_v<Op, ark::op::max>) {
    return std::memcmp(&got, &ref.exact, sizeof(T)) == 0;
  } else {
    const double g = as_double(got);
    if (std::isnan(g)) return false;
    const double tol = 2.0 * world * unit_roundoff<T>() * ref.magnitude + 1e-30;
    return std::fabs(g - ref.value) <= tol;
  }
}

template <class T>
std::string show(T v) {
  if constexpr (is_float<T>)
    return std::to_string(as_double(v));
  else
    return std::to_string(static_cast<long long>(v));
}

/// Fills with a poison byte pattern: NaN for the float types.
template <class T>
void poison(std::vector<T>& v, unsigned char byte) {
  if (!v.empty()) std::memset(static_cast<void*>(v.data()), byte, v.size() * sizeof(T));
}

} // namespace ark_test
