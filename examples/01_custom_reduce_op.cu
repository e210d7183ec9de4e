// examples/01_custom_reduce_op.cu: a reduction op of your own. Any trivially copyable functor
// whose operator() takes and returns the accumulation type (float for fp16/bf16) on host and
// device is a reduce_op; finalize() and an id are optional.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 01_custom_reduce_op.cu -o custom_op
//   hipcc -std=c++20 -x hip       -I ark/include 01_custom_reduce_op.cu -o custom_op
//   g++   -std=c++20 -x c++       -I ark/include 01_custom_reduce_op.cu -o custom_op -pthread
//   ./custom_op [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

// readme:begin absmax
/// The value of largest magnitude, sign kept.
struct absmax {
  static constexpr std::uint8_t id = 64; // optional: lets ranks check they all use the same op
  template <class A>
  ARK_HD A operator()(A a, A b) const {
    return (a < A(0) ? -a : a) < (b < A(0) ? -b : b) ? b : a;
  }
};
static_assert(ark::reduce_op<absmax, float> && ark::reduce_op<absmax, ark::bf16>);
// readme:end

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t n = 4096;
  std::vector<ark::bf16> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = ark::bf16(static_cast<float>(i % 2 ? rank : -rank));
  P::memory buffer = P::allocate(n * sizeof(ark::bf16), device); // before the communicator (example 00)
  auto* data = reinterpret_cast<ark::bf16*>(buffer.ptr);
  P::copy(data, v.data(), n * sizeof(ark::bf16));
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    comm.all_reduce(data, data, n, absmax{});
    comm.synchronize();
  }
  P::copy(v.data(), data, n * sizeof(ark::bf16));
  P::release(buffer);
  for (std::size_t i = 0; i < n; ++i)
    if (static_cast<float>(v[i]) != static_cast<float>(i % 2 ? world - 1 : -(world - 1))) return false;
  return true;
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("custom_op: skipped: no GPU visible"), 0;
  const int world = argc > 1 ? std::atoi(argv[1]) : P::synchronous_launch ? 4 : P::device_count();
  if (world < 1 || world > ark::max_world)
    return std::fprintf(stderr, "usage: %s [ranks, 1 to %d]\n", argv[0], ark::max_world), 64;
  auto group = std::make_shared<ark::in_process_group>(world);
  std::vector<int> ok(world, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        ok[r] = rank_main(group, r, world);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
    });
  for (auto& t : ranks) t.join();
  const bool all = std::count(ok.begin(), ok.end(), 1) == world;
  std::printf("%s: absmax all-reduce of bf16 over %d ranks: %s\n", P::name, world, all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
