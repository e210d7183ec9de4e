// ark/concepts/reduce_op.hpp: the requirements on a reduction operator.
//
// A type Op is a reduce_op for element type T when:
//   1. Op is trivially copyable (it is passed by value into kernels);
//   2. `op(a, b)` with `a, b` of type acc_t<T> (float for fp16/bf16, T otherwise) is callable on the
//      host and on the device and returns acc_t<T>; it must be associative and commutative up to
//      rounding, since ranks are combined in rank order but pipelined in pieces;
//   3. optionally, `op.finalize(a, world)` returns acc_t<T>; it is applied once to each fully
//      reduced value (`avg` divides by the world size there);
//   4. optionally, `static constexpr std::uint8_t id` names the op so that ranks can check they all
//      passed the same one; user ops without an id are checked as "a user op".
// The requirements use std::same_as rather than std::convertible_to: hipcc rejects declval-based
// standard concepts in device compilation.
#pragma once

#include "ark/core/dtype.hpp"

#include <concepts>
#include <cstdint>
#include <type_traits>

namespace ark {

template <class Op, class T>
concept reduce_op = element<T> && std::is_trivially_copyable_v<Op> && requires(const Op& op, acc_t<T> a) {
  { op(a, a) } -> std::same_as<acc_t<T>>;
};

/// True when Op has a `finalize(acc, world)` step for element type T.
template <class Op, class T>
concept finalizing_op = reduce_op<Op, T> && requires(const Op& op, acc_t<T> a, int world) {
  { op.finalize(a, world) } -> std::same_as<acc_t<T>>;
};

namespace detail {
template <class Op>
concept has_op_id = requires {
  Op::id;
};
} // namespace detail

/// The id ranks compare to detect different ops; 0xff for a user op without one.
template <class Op>
inline constexpr std::uint8_t op_id = [] {
  if constexpr (detail::has_op_id<Op>)
    return static_cast<std::uint8_t>(Op::id);
  else
    return static_cast<std::uint8_t>(0xff);
}();

} // namespace ark
