// ark/ops/dynamic.hpp: a built-in reduction chosen at run time, for callers that learn the op
// from data (a C API such as NCCL's, a language binding): one kernel per element type serves
// every op, where each built-in op compiles kernels of its own. The choice is uniform across a
// call's threads, so the branch costs a few instructions per element, not divergence.
//
//   ark::op::dynamic op{ark::op::dynamic::kind::max};
//   comm.all_reduce(in, out, n, op);
//
// premul_sum (NCCL's ncclRedOpCreatePreMulSum): the sum of every rank's input times `scale`,
// computed as scale * (the sum), applied once to each reduced value (finalize): exact for the
// integers (both sides wrap alike), within rounding of the premultiplied sum for the floats.
// The factor is a value, or lies in memory the kernels read at the call (`scale_at`, of type
// `scale_type`: device memory on GPUs), so that a factor computed on the GPU needs no copy back.
#pragma once

#include "ark/ops/builtin.hpp"

#include <cstdint>

namespace ark::op {

struct dynamic {
  enum class kind : std::uint8_t { sum, prod, min, max, avg, premul_sum };
  kind k = kind::sum;
  double scale = 1;                        ///< premul_sum's factor when scale_at is null
  const void* scale_at = nullptr;          ///< premul_sum's factor in memory, read when the call runs
  ark::dtype scale_type = ark::dtype::f64; ///< its type

  template <class A>
  ARK_HD ARK_FORCEINLINE A operator()(A a, A b) const {
    switch (k) {
    case kind::prod:
      return prod{}(a, b);
    case kind::min:
      return min{}(a, b);
    case kind::max:
      return max{}(a, b);
    default: // sum, avg, premul_sum: sums until finalize
      return sum{}(a, b);
    }
  }

  template <class A>
  ARK_HD ARK_FORCEINLINE A finalize(A a, int world) const {
    if (k == kind::avg) return avg{}.finalize(a, world);
    if (k != kind::premul_sum) return a;
    return detail::wrap_mul(a, factor<A>());
  }

private:
  template <class A>
  ARK_HD ARK_FORCEINLINE A factor() const {
    if (!scale_at) return static_cast<A>(scale);
    switch (scale_type) {
    case ark::dtype::f32:
      return static_cast<A>(*static_cast<const float*>(scale_at));
    case ark::dtype::i32:
      return static_cast<A>(*static_cast<const std::int32_t*>(scale_at));
    case ark::dtype::i64:
      return static_cast<A>(*static_cast<const std::int64_t*>(scale_at));
    case ark::dtype::u8:
      return static_cast<A>(*static_cast<const std::uint8_t*>(scale_at));
    case ark::dtype::i8:
      return static_cast<A>(*static_cast<const std::int8_t*>(scale_at));
    case ark::dtype::f16:
      return static_cast<A>(static_cast<float>(*static_cast<const fp16*>(scale_at)));
    case ark::dtype::bf16:
      return static_cast<A>(static_cast<float>(*static_cast<const bf16*>(scale_at)));
    default:
      return static_cast<A>(*static_cast<const double*>(scale_at));
    }
  }
};

} // namespace ark::op

namespace ark {
static_assert(finalizing_op<op::dynamic, float> && finalizing_op<op::dynamic, bf16> &&
              finalizing_op<op::dynamic, std::int64_t>);
} // namespace ark
