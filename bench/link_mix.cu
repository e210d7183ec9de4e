// bench/link_mix.cu: how many bytes per second two GPUs can push to each other at once, by the
// copy engine, by SM stores, and by both together.
//
// The question it answers (docs/perf.md, "What the link allows"): ark's large all-reduce sends S
// bytes each way at two ranks, so its busbw is bounded by the one-way rate the link sustains in
// both directions at once. The copy engine alone reaches ~390 GB/s each way and SM stores ~365:
// a path beyond either would have to run both on the link together. Every mode below moves
// `bytes` from each GPU into the other's memory at the same time (both directions, as in an
// all-reduce) and prints the rate each way:
//   ce K      the copy engine, the bytes cut into K copies on K streams (K = 1, 2, 4)
//   sm B      a kernel of B blocks x 512 threads, 16-byte stores into the peer (B: every SM, half)
//   mix F B   F % of the bytes by a kernel of B blocks, the rest by one copy, at once
// Times are host-side (both GPUs idle, then everything enqueued, then both synchronized), the
// median of the runs (the launches and the two synchronizations included: a few microseconds
// against ~1.3 ms at 512 MB); the destination is checked after each mode's last run.
//
//   build/bench/link_mix [BYTES (default 512M)] [RUNS (default 15)]
#include "ark/ark.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using gpu = ark::platform::gpu;
namespace rt = ark::detail::rt;

namespace {

/// dst[i] = src[i] for n 16-byte vectors, split over the blocks.
struct sm_copy {
  const ark::vec<16>* src;
  ark::vec<16>* dst;
  std::size_t n;
  template <class G>
  ARK_HD void operator()(G& g, unsigned worker, unsigned workers) const {
    const std::size_t stride = static_cast<std::size_t>(workers) * g.size();
    for (std::size_t i = worker * static_cast<std::size_t>(g.size()) + g.thread_rank(); i < n; i += stride)
      dst[i] = src[i];
  }
};

/// One way of moving the bytes: the first `sm_bytes` by a kernel of `blocks` blocks, the rest
/// by `copies` copies on as many streams.
struct mode {
  std::string name;
  double sm_share;
  unsigned blocks;
  int copies;
};

struct side {
  int device;
  gpu::memory src, dst;            // src here, dst here (written by the peer)
  std::vector<std::uint32_t> sent; // what src holds, kept to check the peer's dst against
  std::vector<gpu::stream> streams;
};

/// Fills s.src with a pattern of `seed`, kept in s.sent.
void fill(side& s, std::uint32_t seed) {
  s.sent.resize(s.src.bytes / 4);
  for (std::size_t i = 0; i < s.sent.size(); ++i)
    s.sent[i] = static_cast<std::uint32_t>(i * 2654435761u) ^ seed;
  gpu::copy(s.src.ptr, s.sent.data(), s.src.bytes);
}

/// Words of `got` (a device buffer) that differ from `want`.
std::size_t mismatches(const gpu::memory& got, const std::vector<std::uint32_t>& want) {
  std::vector<std::uint32_t> a(want.size());
  gpu::copy(a.data(), got.ptr, got.bytes);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += a[i] != want[i];
  return bad;
}

/// Waits until both GPUs are idle.
void synchronize(const side (&sides)[2]) {
  for (const side& s : sides) {
    rt::check(rt::set_device(s.device), "set device");
    rt::check(rt::device_synchronize(), "synchronize");
  }
}

/// Enqueues side s's share of mode m: its src into the peer's dst.
void enqueue(const side& s, const side& peer, const mode& m) {
  const std::size_t bytes = s.src.bytes;
  const std::size_t sm = static_cast<std::size_t>(static_cast<double>(bytes) * m.sm_share) / 16 * 16;
  rt::check(rt::set_device(s.device), "set device");
  if (sm)
    gpu::launch(s.streams[0], ark::launch_shape{m.blocks, 512},
                sm_copy{reinterpret_cast<const ark::vec<16>*>(s.src.ptr),
                        reinterpret_cast<ark::vec<16>*>(peer.dst.ptr), sm / 16});
  const std::size_t rest = bytes - sm;
  const std::size_t piece = (rest / static_cast<std::size_t>(m.copies) + 15) / 16 * 16;
  for (int k = 0; k < m.copies; ++k) {
    const std::size_t off = sm + piece * static_cast<std::size_t>(k);
    if (off >= bytes) break;
    const std::size_t n = std::min(piece, bytes - off);
    rt::check(rt::memcpy_async(peer.dst.ptr + off, s.src.ptr + off, n, s.streams[1 + k]), "copy");
  }
}

} // namespace

int main(int argc, char** argv) {
  std::size_t bytes = std::size_t{512} << 20;
  int runs = 15;
  if (argc > 1) { // a number of bytes, K, M or G after it multiplying by 2^10, 2^20, 2^30
    char* end = nullptr;
    bytes = std::strtoull(argv[1], &end, 0);
    const std::string unit = end ? end : "";
    if (unit == "K" || unit == "M" || unit == "G")
      bytes <<= unit == "K" ? 10 : unit == "M" ? 20 : 30;
    else if (!unit.empty())
      bytes = 0;
    bytes = bytes / 16 * 16;
  }
  if (argc > 2) runs = std::atoi(argv[2]);
  if (gpu::device_count() < 2 || bytes == 0 || runs < 1) {
    std::fprintf(stderr, "link_mix: needs two GPUs, BYTES > 0 and RUNS > 0\n");
    return 2;
  }
  side sides[2];
  for (int d = 0; d < 2; ++d) {
    side& s = sides[d];
    s.device = d;
    s.src = gpu::allocate(bytes, d);
    s.dst = gpu::allocate(bytes, d);
    fill(s, 0x9e3779b9u * static_cast<std::uint32_t>(d + 1));
    for (int k = 0; k < 5; ++k) s.streams.push_back(gpu::create_stream(d));
    int ok = 0;
    rt::check(rt::can_access_peer(&ok, d, 1 - d), "query peer access");
    if (!ok) {
      std::fprintf(stderr, "link_mix: GPU %d cannot access GPU %d\n", d, 1 - d);
      return 2;
    }
    rt::check(rt::set_device(d), "set device");
    rt::check(rt::enable_peer_access(1 - d), "enable peer access");
  }
  int sms = 0;
  rt::check(rt::multiprocessor_count(&sms, 0), "query SMs");
  const unsigned all = static_cast<unsigned>(sms), half = all / 2;
  const std::string a = std::to_string(all), h = std::to_string(half);
  std::vector<mode> modes = {{"ce 1", 0, 0, 1},
                             {"ce 2", 0, 0, 2},
                             {"ce 4", 0, 0, 4},
                             {"sm " + a, 1, all, 1},
                             {"sm " + h, 1, half, 1},
                             {"mix 10 16", 0.10, 16, 1},
                             {"mix 20 32", 0.20, 32, 1},
                             {"mix 30 32", 0.30, 32, 1},
                             {"mix 30 " + h, 0.30, half, 1},
                             {"mix 40 " + h, 0.40, half, 1},
                             {"mix 50 " + a, 0.50, all, 1},
                             {"mix 20 32 ce2", 0.20, 32, 2}};
  std::printf("# link_mix: %zu bytes each way at once, both GPUs; median of %d runs (host-timed)\n", bytes,
              runs);
  std::printf("%-16s %10s %12s %8s\n", "mode", "time_us", "GB/s_each_way", "wrong");
  for (const mode& m : modes) {
    std::vector<double> us;
    for (int r = 0; r < runs + 1; ++r) { // the first run warms up
      synchronize(sides);
      const auto t0 = std::chrono::steady_clock::now();
      enqueue(sides[0], sides[1], m);
      enqueue(sides[1], sides[0], m);
      synchronize(sides);
      const double t =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (r) us.push_back(t);
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    const std::size_t wrong =
        mismatches(sides[1].dst, sides[0].sent) + mismatches(sides[0].dst, sides[1].sent);
    std::printf("%-16s %10.1f %12.1f %8zu\n", m.name.c_str(), med, static_cast<double>(bytes) / med / 1e3,
                wrong);
    for (const side& s : sides) { // a mode that skipped bytes must not pass on the last one's
      rt::check(rt::set_device(s.device), "set device");
      rt::check(rt::memset(s.dst.ptr, 0, bytes), "clear");
    }
  }
  for (side& s : sides) {
    for (auto st : s.streams) gpu::destroy_stream(st);
    gpu::release(s.src);
    gpu::release(s.dst);
  }
  return 0;
}
