// examples/run_ranks.hpp: the scaffolding the numbered examples share. One process drives every
// GPU it sees, one host thread per GPU (rank r uses GPU r); with no GPU, each rank is a host
// thread on the host platform. Copy this file along with an example.
#pragma once

#include "ark/ark.hpp"

#include <cstdio>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

namespace examples {

/// Runs body(comm, rank) on `world` rank threads of platform P; returns 0 if every rank returned
/// true and none threw.
template <class P, class Body>
int run_ranks(int world, Body body, typename ark::communicator<P>::config cfg = {}) {
  auto group = std::make_shared<ark::in_process_group>(world);
  std::vector<int> ok(world, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto mine = cfg;
        mine.device = r;
        ark::communicator<P> comm(ark::in_process_bootstrap(group, r), mine);
        ok[r] = body(comm, r) ? 1 : 0;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
    });
  for (auto& t : ranks) t.join();
  for (int v : ok)
    if (!v) return 1;
  return 0;
}

/// Calls f.template operator()<P>(world) for the GPU platform when GPUs are visible, else for the
/// host platform with `host_ranks` ranks.
template <class F>
int on_every_gpu_or_host(F f, int host_ranks = 4) {
#if defined(ARK_GPU_COMPILER)
  if (const int gpus = ark::platform::gpu::device_count(); gpus > 0)
    return f.template operator()<ark::platform::gpu>(gpus);
#endif
  return f.template operator()<ark::platform::host>(host_ranks);
}

/// A buffer in P's memory (device memory on GPUs), filled from and read back to the host.
template <class P, class T>
struct buffer {
  typename P::memory mem;
  std::size_t n;
  buffer(std::size_t count, int device) : mem(P::allocate(count * sizeof(T) + 16, device)), n(count) {}
  ~buffer() { P::release(mem); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  T* data() const { return reinterpret_cast<T*>(mem.ptr); }
  void upload(const std::vector<T>& v) { P::copy(data(), v.data(), v.size() * sizeof(T)); }
  std::vector<T> download() const {
    std::vector<T> v(n);
    P::copy(v.data(), data(), n * sizeof(T));
    return v;
  }
};

} // namespace examples
