// bench/ark_profile.cu: one rank per process, a fixed stream of all-reduces, for profilers.
//
//   ark_profile RANK WORLD SOCKET BYTES CALLS [auto|one_shot|two_shot|ring]
//
// Every rank joins through the Unix-socket bootstrap, runs CALLS all-reduces of BYTES (float sum,
// host-launched back to back on its stream, the algorithm named or ark's default choice), checks
// the last result and prints the time per call. Profile one rank and run the others plainly:
// Nsight Compute serializes the launches of the processes it runs only, so the peers keep
// running and the profiled kernel finds their packets where it polls (scripts/gpu-session,
// stage `profile`, has the commands). Exit 0: correct; 1: wrong; 2: an ark error.
#include "ark/ark.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using gpu = ark::platform::gpu;

template <class A>
void run(ark::communicator<gpu>& c, const float* in, float* out, std::size_t n, int calls) {
  for (int i = 0; i < calls; ++i) c.all_reduce<A>(in, out, n);
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s RANK WORLD SOCKET BYTES CALLS [auto|one_shot|two_shot|ring]\n", argv[0]);
    return 64;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  const std::size_t n = std::strtoull(argv[4], nullptr, 10) / sizeof(float);
  const int calls = std::atoi(argv[5]);
  const std::string algo = argc > 6 ? argv[6] : "auto";
  try {
    ark::communicator<gpu>::config cfg;
    cfg.device = rank;
    cfg.timeout = std::chrono::seconds(60); // a profiled peer runs slowly
    ark::communicator<gpu> comm(ark::unix_socket_bootstrap(argv[3], rank, world, std::chrono::seconds(60)),
                                cfg);
    std::vector<float> host(n + 1);
    for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i + rank) % 11);
    auto mem = gpu::allocate(2 * (n + 16) * sizeof(float), rank);
    float* in = reinterpret_cast<float*>(mem.ptr);
    float* out = in + n + 16;
    gpu::copy(in, host.data(), n * sizeof(float));
    const auto t0 = std::chrono::steady_clock::now();
    if (algo == "one_shot")
      run<ark::algo::one_shot>(comm, in, out, n, calls);
    else if (algo == "two_shot")
      run<ark::algo::two_shot>(comm, in, out, n, calls);
    else if (algo == "ring")
      run<ark::algo::ring>(comm, in, out, n, calls);
    else
      run<ark::algo::automatic>(comm, in, out, n, calls);
    comm.synchronize();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    gpu::copy(host.data(), out, n * sizeof(float));
    gpu::release(mem);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += static_cast<float>((i + r) % 11);
      bad += host[i] != want;
    }
    std::printf("rank %d: %d all-reduces of %zu bytes (%s): %.2f us per call, %zu wrong\n", rank, calls,
                n * sizeof(float), algo.c_str(), us / calls, bad);
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 2;
  }
}
