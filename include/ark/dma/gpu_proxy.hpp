// ark/dma/gpu_proxy.hpp: the CPU proxy that serves dma::proxy_engine on GPUs.
//
// GPU threads post requests into queues in mapped pinned memory (dma/proxy_engine.hpp); this
// thread reads them and hands each to the GPU's copy engines as stream work:
//
//   copy `bytes` src -> dst;  store `value` at `flag`;  store n + 1 at the queue's `completed`
//
// The two stores are stream memory operations, ordered after the copy by a memory barrier, so
// neither the receiver's flag nor the sender's completion counter ever needs the CPU again: the
// proxy only issues. Worker w's requests go to stream w % streams (up to 16 streams, so that
// the GPU's copy engines run several copies at once), in order, so a channel's flags only grow;
// the completion counter is written once per batch of requests the proxy found together.
// ARK's hardware engine made this hop unnecessary; on stock GPUs it is the portable path (CUDA
// and HIP alike; MSCCL++'s port channel and ARK's software path do the same).
#pragma once

#include "ark/concepts/device.hpp"
#include "ark/platform/host.hpp"
#include "ark/dma/engine_queue.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ark::dma {

/// The proxy of one rank on an asynchronous device P (a GPU).
template <async_device P>
class gpu_proxy {
public:
  static constexpr unsigned max_streams = 16;

  gpu_proxy() = default;
  gpu_proxy(const gpu_proxy&) = delete;
  gpu_proxy& operator=(const gpu_proxy&) = delete;
  ~gpu_proxy() { stop(); }

  /// engine_host / engine_device: the rank's engine memory as the host and the GPU address it;
  /// ctl_host: its control block, where a failed copy is recorded.
  /// shared_context: ranks share the GPU's context, whose hardware queues every stream of every
  /// rank needs one of (docs/guide.md, "Ranks that share a GPU"): one stream then.
  void start(std::byte* engine_host, std::byte* engine_device, control_block* ctl_host, const layout& lay,
             int device, int priority, bool shared_context = false) {
    stop();
    device_ = device;
    // Every stream now, none once calls run: creating a stream can wait for the kernels running
    // on the GPU to end, and those may be waiting for this very proxy's copies: a hang until they
    // time out (docs/perf.md; yaksa met the same, pmodels/yaksa#228). A stream that never
    // carries work still takes a share of the GPU's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS);
    // a hang is worse.
    const unsigned most = shared_context ? 1 : max_streams;
    const unsigned n = lay.all_workers() < most ? lay.all_workers() : most;
    streams_.reserve(n);
    for (unsigned i = 0; i < n; ++i) streams_.push_back(P::create_stream(device, priority));
    stop_.store(false);
    thread_ = std::thread([=, this] { run(engine_host, engine_device, ctl_host, lay); });
  }

  void stop() noexcept {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    for (auto s : streams_) {
      try {
        P::synchronize(s);
      } catch (...) { // a failed copy was recorded when it was issued
      }
      P::destroy_stream(s);
    }
    streams_.clear();
  }

  /// Streams it holds.
  std::size_t streams() const { return streams_.size(); }
  /// Batches of requests issued so far (all workers).
  std::uint64_t batches() const { return batches_.load(); }

private:
  using H = platform::host; // this thread's own reads of the queues

  void run(std::byte* host, std::byte* dev, control_block* ctl, layout lay) {
    std::vector<std::uint64_t> next(lay.all_workers(), 0);
    std::uint64_t idle_since = 0;
    unsigned spins = 0;
    try {
      P::use_device(device_);
    } catch (...) {
      return fail(ctl, 0, 0);
    }
    while (!stop_.load(std::memory_order_relaxed)) {
      bool worked = false;
      for (unsigned w = 0; w < lay.all_workers(); ++w) {
        const std::uint64_t posted = H::load_acquire(&queue(lay, host, w)->posted);
        if (next[w] == posted) continue;
        const typename P::stream s = streams_[w % streams_.size()];
        try {
          for (; next[w] < posted; ++next[w]) {
            const engine_request r = requests(lay, host, w)[next[w] % queue_capacity(lay)];
            if (r.dst && r.bytes)
              P::copy_async(reinterpret_cast<void*>(r.dst), reinterpret_cast<const void*>(r.src), r.bytes, s);
            if (r.flag) P::write_value_async(s, reinterpret_cast<std::uint64_t*>(r.flag), r.value);
          }
          P::write_value_async(s, &queue(lay, dev, w)->completed, next[w]);
        } catch (...) {
          return fail(ctl, w, next[w]);
        }
        batches_.fetch_add(1, std::memory_order_relaxed);
        worked = true;
      }
      // spin while requests come; once idle for a millisecond, poll every 50 us
      if (worked) {
        spins = 0;
        idle_since = 0;
      } else if (H::pause(0), ++spins % 1024 == 0) {
        const std::uint64_t now = H::now_ns();
        if (!idle_since) idle_since = now;
        if (now - idle_since > 1000000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  /// Records the failure as the rank's error (the posting GPU then times out waiting for it) and
  /// raises its abort flag, so that waits on this rank end promptly.
  static void fail(control_block* ctl, unsigned worker, std::uint64_t request) {
    error_record& e = ctl->host_err; // this thread is its only writer
    if (std::atomic_ref<std::uint32_t>(e.code).load(std::memory_order_relaxed) == 0)
      publish_record<H>(e, errc::platform, -1, worker, static_cast<std::uint32_t>(wait_kind::engine), request,
                        0, 0);
    std::atomic_ref<std::uint64_t>(ctl->abort).store(1);
  }

  int device_ = 0;
  std::vector<typename P::stream> streams_;
  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<std::uint64_t> batches_{0};
};

} // namespace ark::dma
