// tests/gpu/gpu_rank.cu: one rank of the multi-process GPU test (one process per GPU).
//   ark_gpu_rank RANK WORLD SOCKET
// Joins through the Unix-socket bootstrap (IPC handles for the symmetric regions), runs
// all-reduces over both SM backends and checks them. Exit 0: correct; 1: wrong; 2: timeout.
#include "ark/ark.hpp"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) return 64;
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  using gpu = ark::platform::gpu;
  try {
    ark::communicator<gpu>::config cfg;
    cfg.device = rank;
    ark::communicator<gpu> comm(ark::unix_socket_bootstrap(argv[3], rank, world, std::chrono::seconds(5)),
                                cfg);
    const std::size_t n = (1 << 20) + 5;
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i + rank) % 11);
    auto mem = gpu::allocate(2 * n * sizeof(float) + 64, rank);
    float* src = reinterpret_cast<float*>(mem.ptr);
    float* dst = src + n + 3;
    gpu::copy(src, in.data(), n * sizeof(float));
    comm.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<4>>(src, dst, 4000);
    comm.all_reduce<ark::algo::ring, ark::dma::thread_copy<4>>(src, dst + 4000, n - 4000);
    comm.synchronize();
    std::vector<float> out(n);
    gpu::copy(out.data(), dst, n * sizeof(float));
    gpu::release(mem);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t j = i < 4000 ? i : i - 4000;
      float want = 0;
      for (int r = 0; r < world; ++r) want += static_cast<float>((j + r) % 11);
      bad += out[i] != want;
    }
    std::printf("rank %d of %d (process %d): %zu wrong\n", rank, world, static_cast<int>(::getpid()), bad);
    return bad ? 1 : 0;
  } catch (const ark::timeout_error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 3;
  }
}
