// examples/04_custom_dma_backend.cu: a DMA backend of your own. A backend is a stateless type
// with static, scope-collective functions (ark/concepts/dma_backend.hpp). This one moves payload
// in 8-byte units (for links where wide stores are a poor fit) and reuses ark's pieces: raw
// transfers done by threads, and the "simple" channel protocol (slots, headers, head and ack
// flags). Only `vec_bytes` and `id` are new.
//
//   nvcc  -std=c++20 -arch=native -I ark/include 04_custom_dma_backend.cu -o custom_backend
//   hipcc -std=c++20 -x hip       -I ark/include 04_custom_dma_backend.cu -o custom_backend
//   g++   -std=c++20 -x c++       -I ark/include 04_custom_dma_backend.cu -o custom_backend -pthread
//   ./custom_backend [ranks]
#include "ark/ark.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using P = ark::platform::native; // the GPU under nvcc or hipcc, the host platform under g++

// readme:begin narrow_copy
template <unsigned Depth>
struct narrow_copy : ark::dma::thread_transfers<Depth>, ark::dma::simple_channel<narrow_copy<Depth>> {
  static constexpr std::uint8_t id = 200;     // ranks compare it: all must use the same backend
  static constexpr bool ll = false;           // payload in slots, announced by a flag
  static constexpr std::size_t vec_bytes = 8; // passes load and store 8-byte vectors
};
static_assert(ark::dma_backend<narrow_copy<2>>, "narrow_copy must model ark::dma_backend");
// readme:end

bool rank_main(std::shared_ptr<ark::in_process_group> group, int rank, int world) {
  const int device = rank % P::device_count();
  const std::size_t n = 100001;
  std::vector<double> host(n, 0.5 * rank);
  P::memory buffer = P::allocate(n * sizeof(double), device); // before the communicator (example 00)
  auto* data = reinterpret_cast<double*>(buffer.ptr);
  P::copy(data, host.data(), n * sizeof(double));
  {
    ark::communicator<P>::config cfg;
    cfg.device = device;
    ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
    comm.all_reduce<ark::algo::ring, narrow_copy<2>>(data, data, n, ark::op::max{});
    comm.synchronize();
  }
  P::copy(host.data(), data, n * sizeof(double));
  P::release(buffer);
  return std::all_of(host.begin(), host.end(), [&](double v) { return v == 0.5 * (world - 1); });
}

int main(int argc, char** argv) {
  if (P::device_count() < 1) return std::puts("custom_backend: skipped: no GPU visible"), 0;
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
  std::printf("%s: ring all-reduce (max) over the narrow_copy backend, %d ranks: %s\n", P::name, world,
              all ? "correct" : "WRONG");
  return all ? 0 : 1;
}
