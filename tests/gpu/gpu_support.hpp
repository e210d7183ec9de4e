// tests/gpu/gpu_support.hpp: what the GPU test files share: the platform, the worlds this
// machine can form (every GPU, and one GPU alone), and a configuration with small slots so that
// moderate sizes already take many pipeline steps on several blocks.
#pragma once

#include "../support/collective_check.hpp"

namespace ark_test {

using gpu = ark::platform::gpu;
using gpu_comm = ark::communicator<gpu>;

inline int gpu_count() { return gpu::device_count(); }

/// One GPU alone, and all of them together (when there are several).
inline std::vector<int> gpu_worlds() {
  const int n = gpu_count();
  std::vector<int> w;
  if (n >= 1 && (n == 1 || !std::getenv("ARK_SANITIZE"))) w.push_back(1);
  if (n >= 2) w.push_back(n);
  return w;
}

inline gpu_comm::config gpu_small_config() {
  gpu_comm::config c;
  c.team.workers = 8;
  c.team.max_depth = 8;
  c.team.slot_bytes = 4096;
  c.team.ll_slot_bytes = 2048;
  c.team.staging = false;
  c.tuning.threads = 256;
  c.tuning.bytes_per_worker = 16 << 10;
  c.tuning.ll_bytes_per_worker = 2048;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

/// Size classes: empty, one element, odd, LL range, several slots per block, many blocks.
/// Under compute-sanitizer (ARK_SANITIZE set) only the small ones, on all GPUs.
inline const std::vector<std::size_t>& gpu_sizes() {
  static const std::vector<std::size_t> full{0, 1, 1023, 65537, (1u << 20) + 3}, small{0, 1, 1023, 4099};
  return std::getenv("ARK_SANITIZE") ? small : full;
}

#define ARK_REQUIRE_GPUS(n)                                                                                  \
  if (ark_test::gpu_count() < (n)) {                                                                         \
    MESSAGE("skipped: needs " << (n) << " GPUs, found " << ark_test::gpu_count());                           \
    return;                                                                                                  \
  }

template <ark::collective K, class T, class Algos, class Backends, class Ops>
void gpu_matrix(Algos a, Backends b, Ops o) {
  run_matrix<K, T, gpu>(a, b, o, gpu_small_config(), gpu_worlds(), gpu_sizes());
}

} // namespace ark_test
