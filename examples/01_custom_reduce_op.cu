// examples/01_custom_reduce_op.cu: a reduction op of your own.
// Any trivially copyable functor whose operator() takes and returns the accumulation type
// (float for fp16/bf16) on host and device is a reduce_op; finalize() and an id are optional.
#include "run_ranks.hpp"

/// The value of largest magnitude, sign kept.
struct absmax {
  static constexpr std::uint8_t id = 64; // optional: lets ranks check they all use the same op
  template <class A>
  ARK_HD A operator()(A a, A b) const {
    return (a < A(0) ? -a : a) < (b < A(0) ? -b : b) ? b : a;
  }
};
static_assert(ark::reduce_op<absmax, float> && ark::reduce_op<absmax, ark::bf16>);

struct custom_op {
  template <class P>
  int operator()(int world) const {
    const int rc = examples::run_ranks<P>(world, [world](ark::communicator<P>& comm, int rank) {
      const std::size_t n = 4096;
      std::vector<ark::bf16> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = ark::bf16(static_cast<float>(i % 2 ? rank : -rank));
      examples::buffer<P, ark::bf16> data(n, rank);
      data.upload(v);
      comm.all_reduce(data.data(), data.data(), n, absmax{});
      comm.synchronize();
      const auto out = data.download();
      for (std::size_t i = 0; i < n; ++i)
        if (static_cast<float>(out[i]) != static_cast<float>(i % 2 ? world - 1 : -(world - 1))) return false;
      return true;
    });
    std::printf("%s: absmax all-reduce of bf16 over %d ranks: %s\n", P::name, world,
                rc ? "WRONG" : "correct");
    return rc;
  }
};

int main() { return examples::on_every_gpu_or_host(custom_op{}); }
