// tests/support/persistent_loop.hpp: a persistent loop of compute and all-reduce through the
// device handle, which the host tests launch with communicator::launch and the GPU tests from a
// kernel of their own (examples/02_persistent_loop.cu is the same loop as a program).
#pragma once

#include "ark/ark.hpp"

namespace ark_test {

/// A persistent loop: every worker repeatedly computes on its share of `data` and all-reduces it
/// through the device handle; no host involvement between iterations.
template <class B, class Comm>
struct persistent_loop {
  Comm comm;
  std::int64_t* data;
  std::size_t n;
  int iterations;
  int rank;

  static constexpr std::int64_t modulus = 1000003;

  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    const ark::elem_range mine = ctx.template partition<std::int64_t>(n);
    for (std::size_t i = mine.begin + ctx.g.thread_rank(); i < mine.end(); i += ctx.g.size())
      data[i] = static_cast<std::int64_t>(i);
    for (int k = 0; k < iterations; ++k) {
      // "compute": every worker updates only its own share, the share its all-reduce covers
      for (std::size_t i = mine.begin + ctx.g.thread_rank(); i < mine.end(); i += ctx.g.size())
        data[i] = (data[i] * 3 + rank + k) % modulus;
      ctx.g.sync();
      if (!comm.template all_reduce<ark::algo::one_shot, B>(ctx.g, ctx.worker, ctx.workers, data, data, n))
        return false;
      ctx.g.sync();
    }
    return true;
  }
};

/// What persistent_loop leaves in element i.
inline std::int64_t persistent_loop_expected(std::size_t i, int iterations, int world) {
  std::int64_t x = static_cast<std::int64_t>(i);
  for (int k = 0; k < iterations; ++k) {
    std::int64_t sum = 0;
    for (int r = 0; r < world; ++r) sum += (x * 3 + r + k) % 1000003;
    x = sum;
  }
  return x;
}

} // namespace ark_test
