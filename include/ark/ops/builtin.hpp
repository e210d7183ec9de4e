// ark/ops/builtin.hpp: the built-in reduction operators: sum, prod, min, max, avg.
//
// Integer sum and prod wrap around (two's complement), as NCCL's do, without undefined behaviour.
// avg sums and divides once by the world size (integer division truncates).
#pragma once

#include "ark/concepts/reduce_op.hpp"

#include <type_traits>

namespace ark::op {
namespace detail {
template <class A>
ARK_HD ARK_FORCEINLINE A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A>
ARK_HD ARK_FORCEINLINE A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
} // namespace detail

struct sum {
  static constexpr std::uint8_t id = 0;
  template <class A>
  ARK_HD ARK_FORCEINLINE A operator()(A a, A b) const {
    return detail::wrap_add(a, b);
  }
};

struct prod {
  static constexpr std::uint8_t id = 1;
  template <class A>
  ARK_HD ARK_FORCEINLINE A operator()(A a, A b) const {
    return detail::wrap_mul(a, b);
  }
};

struct min {
  static constexpr std::uint8_t id = 2;
  template <class A>
  ARK_HD ARK_FORCEINLINE A operator()(A a, A b) const {
    return b < a ? b : a;
  }
};

struct max {
  static constexpr std::uint8_t id = 3;
  template <class A>
  ARK_HD ARK_FORCEINLINE A operator()(A a, A b) const {
    return a < b ? b : a;
  }
};

struct avg {
  static constexpr std::uint8_t id = 4;
  template <class A>
  ARK_HD ARK_FORCEINLINE A operator()(A a, A b) const {
    return detail::wrap_add(a, b);
  }
  template <class A>
  ARK_HD ARK_FORCEINLINE A finalize(A a, int world) const {
    return a / static_cast<A>(world);
  }
};

} // namespace ark::op

namespace ark {
static_assert(reduce_op<op::sum, float> && reduce_op<op::prod, fp16> && reduce_op<op::min, std::uint8_t>);
static_assert(finalizing_op<op::avg, bf16> && !finalizing_op<op::sum, float>);
} // namespace ark
