// bench/demo.cpp: ark's main job in one screen. An all-reduce (float sum, in place, the algorithm
// ark picks by size) over every GPU this process sees, one host thread per GPU; with no GPU, over
// 4 ranks of the host platform. Prints nccl-tests-style columns and checks every result.
// Built twice: by the host compiler (demo_host) and by nvcc (demo_gpu, from demo_gpu.cu).
#include "ark/ark.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

namespace {

struct row {
  std::size_t bytes;
  const char* algorithm;
  const char* backend;
  double us;
  bool ok;
};

template <class P>
std::vector<row> rank_main(std::shared_ptr<ark::in_process_group> group, int rank, std::size_t max_bytes) {
  typename ark::communicator<P>::config cfg;
  cfg.device = rank;
  ark::communicator<P> comm(ark::in_process_bootstrap(group, rank), cfg);
  const int world = comm.world();
  const std::size_t max_count = max_bytes / sizeof(float);
  auto mem = P::allocate(max_bytes, rank);
  float* data = reinterpret_cast<float*>(mem.ptr);
  std::vector<float> host(max_count);
  std::vector<row> rows;
  for (std::size_t bytes = 8; bytes <= max_bytes; bytes *= 4) {
    const std::size_t n = bytes / sizeof(float);
    const int iters = bytes <= (1 << 20) ? 50 : bytes <= (64 << 20) ? 10 : 3;
    std::vector<double> times;
    bool ok = true;
    for (int it = -1; it < iters; ++it) { // it == -1: warm-up, also checked
      for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i + rank) % 17);
      P::copy(data, host.data(), bytes);
      comm.all_reduce(data, data, n);
      comm.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      comm.all_reduce(data, data, n);
      comm.synchronize();
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      P::copy(host.data(), data, bytes);
      for (std::size_t i = 0; i < n && ok; ++i) {
        float once = 0;
        for (int r = 0; r < world; ++r) once += static_cast<float>((i + r) % 17);
        ok = host[i] == once * world; // the second all-reduce sums `world` copies of the first
      }
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    const ark::choice c = ark::select(ark::collective::all_reduce, bytes, world, cfg.tuning);
    rows.push_back({bytes, ark::algorithm_name(c.algorithm), c.ll ? "ll_packet" : "thread_copy",
                    times[times.size() / 2], ok});
  }
  P::release(mem);
  return rows;
}

template <class P>
int run(int world, std::size_t max_bytes) {
  auto group = std::make_shared<ark::in_process_group>(world);
  std::vector<std::vector<row>> rows(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back([&, r] { rows[r] = rank_main<P>(group, r, max_bytes); });
  for (auto& t : ranks) t.join();
  std::printf("# ark all-reduce demo: platform %s, %d ranks, float sum, in place, median of timed calls\n",
              P::name, world);
  std::printf("%12s %10s %-9s %-12s %10s %9s %9s %6s\n", "size(B)", "count", "algorithm", "backend",
              "time(us)", "algbw", "busbw", "check");
  bool all_ok = true;
  for (std::size_t k = 0; k < rows[0].size(); ++k) {
    const row& r0 = rows[0][k];
    bool ok = true;
    for (int r = 0; r < world; ++r) ok = ok && rows[r][k].ok;
    all_ok = all_ok && ok;
    const double algbw = r0.bytes / r0.us / 1e3; // GB/s
    const double busbw = algbw * 2.0 * (world - 1) / world;
    std::printf("%12zu %10zu %-9s %-12s %10.2f %9.2f %9.2f %6s\n", r0.bytes, r0.bytes / sizeof(float),
                r0.algorithm, r0.backend, r0.us, algbw, busbw, ok ? "ok" : "WRONG");
  }
  return all_ok ? 0 : 1;
}

} // namespace

int main() {
#if defined(ARK_GPU_COMPILER)
  if (const int gpus = ark::platform::gpu::device_count(); gpus > 0)
    return run<ark::platform::gpu>(gpus, 256u << 20);
#endif
  return run<ark::platform::host>(4, 16u << 20);
}
