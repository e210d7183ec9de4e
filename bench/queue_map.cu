// bench/queue_map.cu: which streams of one context share a hardware queue (CUDA's connections,
// CUDA_DEVICE_MAX_CONNECTIONS; ROCm's GPU_MAX_HW_QUEUES). Streams on one queue run their steps
// in the order they were enqueued, so a step that waits for its stream's earlier, spinning
// kernel holds up every other stream's steps behind it on that queue: where ranks share a
// context this is what ranks sharing a GPU must avoid (README, "Ranks that share a GPU").
//
// For a pair (i, j): a kernel on stream i spins until the host releases it, then a second step
// on i (a kernel, or a copy) waits behind it; then a kernel on stream j writes a marker. If the
// marker does not appear within a few milliseconds, j's kernel sits behind i's waiting step: the
// two streams share a queue. Prints, for every stream, the earlier streams it shares a queue
// with: as made, after some are destroyed and new ones made, and for streams of high priority.
//   queue_map [streams (48)]
#include "ark/ark.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using gpu = ark::platform::gpu;

namespace {

/// Spins (one thread) until *flag == want, at most `bound_ns`.
struct spin_work {
  std::uint64_t* flag;
  std::uint64_t want, bound_ns;
  template <class G>
  ARK_HD void operator()(G& g, unsigned, unsigned) const {
    if (g.thread_rank() != 0) return;
    const std::uint64_t t0 = gpu::now_ns();
    for (unsigned s = 0; gpu::load_acquire(flag) != want && gpu::now_ns() - t0 < bound_ns; ++s) gpu::pause(s);
  }
};

/// Writes *marker = v.
struct mark_work {
  std::uint64_t* marker;
  std::uint64_t v;
  template <class G>
  ARK_HD void operator()(G& g, unsigned, unsigned) const {
    if (g.thread_rank() == 0) gpu::store_release(marker, v);
  }
};

struct prober {
  gpu::control_memory ctl = gpu::allocate_control(256);
  gpu::memory scratch = gpu::allocate(1 << 16, 0);
  std::uint64_t gen = 0;
  std::uint64_t* host(int i) const { return static_cast<std::uint64_t*>(ctl.host_ptr) + 8 * i; }
  std::uint64_t* dev(int i) const { return static_cast<std::uint64_t*>(ctl.device_ptr) + 8 * i; }

  /// Whether j's work waits behind i's blocked step (`copy`: a copy waits behind i's spin).
  bool shared(gpu::stream i, gpu::stream j, bool copy) {
    ++gen;
    const ark::launch_shape one{1, 32};
    gpu::launch(i, one, spin_work{dev(0), gen, 200'000'000});
    if (copy)
      gpu::copy_async(static_cast<std::byte*>(scratch.ptr) + 4096, scratch.ptr, 4096, i);
    else
      gpu::launch(i, one, mark_work{dev(2), gen});
    gpu::launch(j, one, mark_work{dev(1), gen});
    bool seen = false;
    for (int t = 0; t < 3000 && !seen; ++t) { // 3 ms
      seen = __atomic_load_n(host(1), __ATOMIC_ACQUIRE) == gen;
      if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(1));
    }
    __atomic_store_n(host(0), gen, __ATOMIC_RELEASE);
    gpu::synchronize(i);
    gpu::synchronize(j);
    return !seen;
  }
};

std::string sharing(prober& p, const std::vector<gpu::stream>& s, std::size_t j, bool copy) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (i != j && s[i] && p.shared(s[i], s[j], copy)) out.append(" ").append(std::to_string(i));
  return out.empty() ? " -" : out;
}

} // namespace

int main(int argc, char** argv) {
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  if (gpu::device_count() < 1) {
    std::printf("queue_map: skipped: no GPU visible\n");
    return 0;
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 48;
  std::printf("queue_map: %s=%d, %d streams made by gpu::create_stream\n", gpu::hardware_queues_variable,
              gpu::hardware_queues(), n);
  prober p;
  std::vector<gpu::stream> s;
  for (int i = 0; i < n; ++i) s.push_back(gpu::create_stream(0));
  std::printf("as made (a kernel behind the spin): stream: the others it shares a queue with\n");
  for (int j = 0; j < n; ++j) std::printf("  %2d:%s\n", j, sharing(p, s, j, false).c_str());
  std::printf("a copy behind the spin, streams 0-3:\n");
  for (int j = 0; j < 4; ++j) std::printf("  %2d:%s\n", j, sharing(p, s, j, true).c_str());
  // destroy every third of the first 24, make as many again: which queues do they get?
  std::vector<int> gone;
  for (int i = 0; i < 24 && i < n; i += 3) {
    gpu::destroy_stream(s[i]);
    s[i] = nullptr;
    gone.push_back(i);
  }
  std::printf("destroyed:");
  for (int i : gone) std::printf(" %d", i);
  std::printf("; made %zu more as %d..:\n", gone.size(), n);
  for (std::size_t k = 0; k < gone.size(); ++k) s.push_back(gpu::create_stream(0));
  for (std::size_t j = n; j < s.size(); ++j) std::printf("  %2zu:%s\n", j, sharing(p, s, j, false).c_str());
  std::printf("4 streams of the highest priority as %zu..:\n", s.size());
  const std::size_t hi = s.size();
  for (int k = 0; k < 4; ++k) s.push_back(gpu::create_stream(0, -100));
  for (std::size_t j = hi; j < s.size(); ++j) std::printf("  %2zu:%s\n", j, sharing(p, s, j, false).c_str());
  for (auto x : s)
    if (x) gpu::destroy_stream(x);
  return 0;
}
