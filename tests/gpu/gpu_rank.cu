// tests/gpu/gpu_rank.cu: one rank of the multi-process GPU test (one process per rank, on GPU
// rank % GPUs).
//   ark_gpu_rank RANK WORLD SOCKET
// Joins through the Unix-socket bootstrap (IPC handles for the symmetric regions), runs
// all-reduces over both SM backends, then an all-reduce and an all-gather on the copy engine
// (into registered buffers), then, the buffers deregistered, all-gathers into two windows
// registered inside one allocation, and checks them, and that the process holds one IPC mapping
// per peer allocation (the two windows share one), none once the communicator is gone. Exit 0: correct; 1:
// wrong; 2: timeout. The test starts it with lazy module loading, as a user's process runs by default: a
// copy-engine call's first launch of a kernel then waits for the kernels running in its context;
// and once with all its streams on one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1).
#include "ark/ark.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) return 64;
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  using gpu = ark::platform::gpu;
  const int gpus = gpu::device_count();
  if (gpus < 1) {
    std::fprintf(stderr, "rank %d: no GPU\n", rank);
    return 3;
  }
  const int device = rank % gpus; // ranks share GPUs when there are fewer
  // Device memory, kept while an error unwinds: a peer may still be copying into it (the
  // communicator keeps its own memory then too). The buffers the communicator registers are
  // declared before it, so they outlive it.
  struct device_buffer {
    gpu::memory mem;
    ~device_buffer() {
      if (std::uncaught_exceptions() == 0) gpu::release(mem);
    }
  };
  // the IPC mappings this process holds: one per peer and allocation mapped
  auto mappings = [] { return ark::detail::ipc_mappings().size(); };
  auto body = [&]() -> std::size_t {
    const std::size_t n = (1 << 20) + 5, m = 4099;
    const device_buffer ce_mem{gpu::allocate(n * sizeof(float), device)},
        gathered_mem{gpu::allocate(world * m * sizeof(float), device)};
    ark::communicator<gpu>::config cfg;
    cfg.device = device;
    cfg.ce_chunk_bytes = 256 << 10; // the copy-engine all-reduce below in several rounds
    ark::communicator<gpu> comm(ark::unix_socket_bootstrap(argv[3], rank, world, std::chrono::seconds(5)),
                                cfg);
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i + rank) % 11);
    const device_buffer mem{gpu::allocate(2 * n * sizeof(float) + 64, device)};
    float* src = reinterpret_cast<float*>(mem.mem.ptr);
    float* dst = src + n + 3;
    gpu::copy(src, in.data(), n * sizeof(float));
    comm.all_reduce<ark::algo::one_shot, ark::dma::ll_packet<2>>(src, dst, 4000);
    comm.all_reduce<ark::algo::ring, ark::dma::thread_copy<2>>(src, dst + 4000, n - 4000);
    // the copy engine: an all-reduce in place in a registered buffer, then an all-gather of the
    // first m elements of each rank's own input with no kernel moving bytes (max_ctas = 0)
    float* ce = reinterpret_cast<float*>(ce_mem.mem.ptr);
    float* gathered = reinterpret_cast<float*>(gathered_mem.mem.ptr);
    comm.register_buffer(ce, n * sizeof(float));
    comm.register_buffer(gathered, world * m * sizeof(float));
    gpu::copy(ce, in.data(), n * sizeof(float));
    const std::vector<float> poison(world * m, -1.0f);
    gpu::copy(gathered, poison.data(), world * m * sizeof(float));
    comm.all_reduce<ark::algo::automatic, ark::dma::copy_engine>(ce, ce, n);
    ark::call_options<gpu> engine_only;
    engine_only.max_ctas = 0;
    comm.all_gather(src, gathered, m, engine_only);
    comm.synchronize();
    std::vector<float> out(n), ce_out(n), gathered_out(world * m);
    gpu::copy(out.data(), dst, n * sizeof(float));
    gpu::copy(ce_out.data(), ce, n * sizeof(float));
    gpu::copy(gathered_out.data(), gathered, world * m * sizeof(float));
    std::size_t bad = 0;
    auto want_at = [&](std::size_t j) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += static_cast<float>((j + r) % 11);
      return want;
    };
    for (std::size_t i = 0; i < n; ++i) {
      bad += out[i] != want_at(i < 4000 ? i : i - 4000);
      bad += ce_out[i] != want_at(i);
    }
    for (std::size_t i = 0; i < world * m; ++i) // block r: rank r's input
      bad += gathered_out[i] != static_cast<float>((i % m + i / m) % 11);
    // undone, then two windows inside one allocation (the peers map it once, both share that):
    // all-gathers of the inputs from element 1 and from element 2 into them
    const std::size_t peers = static_cast<std::size_t>(world - 1);
    bad += mappings() != 3 * peers; // the region, ce and gathered of each peer
    comm.deregister_buffer(ce);
    comm.deregister_buffer(gathered);
    bad += mappings() != peers;
    float* const g[2] = {ce, ce + world * m + 4};
    for (float* p : g) comm.register_buffer(p, world * m * sizeof(float));
    bad += mappings() != 2 * peers;
    gpu::copy(ce, poison.data(), world * m * sizeof(float));
    gpu::copy(g[1], poison.data(), world * m * sizeof(float));
    for (int k = 0; k < 2; ++k) comm.all_gather(src + 1 + k, g[k], m, engine_only);
    comm.synchronize();
    for (int k = 0; k < 2; ++k) {
      gpu::copy(gathered_out.data(), g[k], world * m * sizeof(float));
      for (std::size_t i = 0; i < world * m; ++i)
        bad += gathered_out[i] != static_cast<float>((i % m + 1 + k + i / m) % 11);
    }
    return bad;
  };
  try {
    std::size_t bad = body();
    bad += mappings() != 0; // the communicator's end closed them all
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
