// ark/dma/gpu_proxy.hpp: the CPU proxy that serves dma::proxy_engine on GPUs.
//
// GPU threads post requests into queues in mapped pinned memory (dma/proxy_engine.hpp); this
// thread reads them and hands each to the GPU's copy engines as stream work:
//
//   copy `bytes` src -> dst;  store `value` at `flag`;  store n + 1 at the queue's `completed`
//
// The two stores are stream memory operations, ordered after the copy by a memory barrier, so
// neither the receiver's flag nor the sender's completion counter ever needs the CPU again: the
// proxy only issues. Worker w's requests go to stream w % streams, in order, so a channel's
// flags only grow. ARK's hardware engine made this hop unnecessary; on stock GPUs it is the
// portable path (CUDA and HIP alike; MSCCL++'s port channel and ARK's software path do the same).
#pragma once

#include "ark/platform/gpu.hpp"
#include "ark/team/layout.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace ark::dma {

class gpu_proxy {
public:
  static constexpr unsigned max_streams = 4;

  gpu_proxy() = default;
  gpu_proxy(const gpu_proxy&) = delete;
  gpu_proxy& operator=(const gpu_proxy&) = delete;
  ~gpu_proxy() { stop(); }

  /// engine_host / engine_device: the rank's engine memory as the host and the GPU address it;
  /// ctl_host: its control block, where a failed copy is recorded.
  void start(std::byte* engine_host, std::byte* engine_device, control_block* ctl_host, const layout& lay,
             int device, int priority) {
    stop();
    device_ = device;
    detail::rt::check(detail::rt::set_device(device), "set device");
    const unsigned n = lay.workers < max_streams ? lay.workers : max_streams;
    streams_.assign(n, nullptr);
    for (auto& s : streams_)
      detail::rt::check(detail::rt::stream_create_priority(&s, priority), "create copy-engine stream");
    stop_.store(false);
    thread_ = std::thread([=, this] { run(engine_host, engine_device, ctl_host, lay); });
  }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    for (auto s : streams_) {
      (void)detail::rt::stream_synchronize(s);
      (void)detail::rt::stream_destroy(s);
    }
    streams_.clear();
  }

  /// Requests issued so far (all workers).
  std::uint64_t issued() const { return issued_.load(); }

private:
  void run(std::byte* host, std::byte* dev, control_block* ctl, layout lay) {
    (void)detail::rt::set_device(device_);
    std::vector<std::uint64_t> next(lay.workers, 0);
    unsigned idle = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      bool worked = false;
      for (unsigned w = 0; w < lay.workers; ++w) {
        const std::uint64_t posted = platform::host::load_acquire(&lay.queue(host, w)->posted);
        detail::rt::stream_t s = streams_[w % streams_.size()];
        for (; next[w] < posted; ++next[w]) {
          const engine_request r = lay.requests(host, w)[next[w] % lay.queue_capacity];
          detail::rt::error_t e = detail::rt::success;
          if (r.dst && r.bytes)
            e = detail::rt::memcpy_async(reinterpret_cast<void*>(r.dst), reinterpret_cast<const void*>(r.src),
                                         r.bytes, s);
          if (e == detail::rt::success && r.flag)
            e = detail::rt::stream_write_value(s, reinterpret_cast<std::uint64_t*>(r.flag), r.value);
          if (e == detail::rt::success)
            e = detail::rt::stream_write_value(s, &lay.queue(dev, w)->completed, next[w] + 1);
          if (e != detail::rt::success) {
            fail(ctl, w, next[w]);
            return;
          }
          issued_.fetch_add(1, std::memory_order_relaxed);
          worked = true;
        }
      }
      idle = worked ? 0 : idle + 1;
      if (!worked) platform::host::pause(idle);
    }
  }

  /// Records the failure as the rank's error (the posting GPU then times out waiting for it) and
  /// raises its abort flag, so that waits on this rank end promptly.
  static void fail(control_block* ctl, unsigned worker, std::uint64_t request) {
    (void)detail::rt::get_last_error();
    std::atomic_ref<std::uint32_t> code(ctl->err.code);
    std::uint32_t zero = 0;
    if (code.compare_exchange_strong(zero, static_cast<std::uint32_t>(errc::platform))) {
      ctl->err.peer = -1;
      ctl->err.worker = worker;
      ctl->err.what = static_cast<std::uint32_t>(wait_kind::engine);
      ctl->err.step = request;
    }
    std::atomic_ref<std::uint64_t>(ctl->abort).store(1);
  }

  int device_ = 0;
  std::vector<detail::rt::stream_t> streams_;
  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<std::uint64_t> issued_{0};
};

} // namespace ark::dma
