// ark/platform/gpu_memory.hpp: GPU memory as the device concept's item 5 asks for it (platform::gpu
// inherits it): symmetric regions in device memory, mapped into peers with peer access inside a
// process and through IPC across processes; control memory in mapped pinned host memory, which
// the host reads while kernels run; clears and copies that wait for their own stream alone.
#pragma once

#include "ark/core/error.hpp"
#include "ark/platform/gpu_ipc.hpp"
#include "ark/platform/gpu_runtime.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>
#include <string>

namespace ark::platform {

struct gpu_memory {
  struct memory {
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
    int device = 0;
  };
  struct ipc_handle {
    detail::rt::ipc_mem_handle_t handle;
    std::uint64_t address; // valid in the exporting process
    std::uint64_t offset;  // from the start of the allocation
    std::uint64_t process; // the exporter's detail::process_token()
    std::int32_t device;   // the GPU the memory is on
    std::uint8_t ipc;      // IPC-capable (else usable inside the exporting process only)
    std::uint8_t past_end; // the memory runs past the end of its allocation: IPC maps one only
  };
  struct control_memory {
    void* host_ptr = nullptr;
    void* device_ptr = nullptr;
  };

  static memory allocate(std::size_t bytes, int device) {
    detail::rt::check(detail::rt::set_device(device), "set device");
    void* p = nullptr;
    detail::rt::check(detail::rt::malloc(&p, bytes), "allocate symmetric region");
    on_own_stream("clear symmetric region",
                  [&](detail::rt::stream_t s) { return detail::rt::memset_async(p, 0, bytes, s); });
    return {static_cast<std::byte*>(p), bytes, device};
  }
  /// Bytes of memory free on `device` now (0 if the runtime cannot tell).
  static std::size_t free_memory(int device) {
    std::size_t free = 0, total = 0;
    if (detail::rt::set_device(device) != detail::rt::success ||
        detail::rt::mem_get_info(&free, &total) != detail::rt::success) {
      (void)detail::rt::get_last_error();
      return 0;
    }
    return free;
  }
  /// Frees m. Freeing waits for every kernel on its GPU (CUDA and HIP do): with ranks that share
  /// a GPU in one process, free nothing while a peer's calls may still be waiting for this rank.
  static void release(memory& m) {
    if (m.ptr) {
      (void)detail::rt::set_device(m.device);
      (void)detail::rt::free(m.ptr);
    }
    m = {};
  }
  static void zero(void* p, std::size_t bytes) {
    on_own_stream("clear memory",
                  [&](detail::rt::stream_t s) { return detail::rt::memset_async(p, 0, bytes, s); });
  }
  /// Copies between any two addresses (host or device) and waits until the data has landed (a
  /// copy from pageable memory may return before its DMA is done, and work on other streams
  /// would race with it).
  static void copy(void* dst, const void* src, std::size_t bytes) {
    on_own_stream("copy",
                  [&](detail::rt::stream_t s) { return detail::rt::memcpy_async(dst, src, bytes, s); });
  }

  static ipc_handle export_handle(const memory& m) {
    ipc_handle h{};
    h.address = reinterpret_cast<std::uint64_t>(m.ptr);
    h.process = detail::process_token();
    if (detail::rt::pointer_device(&h.device, m.ptr) != detail::rt::success) {
      (void)detail::rt::get_last_error();
      if (detail::rt::get_device(&h.device) != detail::rt::success) h.device = m.device;
    }
    void* base = nullptr;
    std::size_t size = 0;
    if (detail::rt::allocation_base(&base, &size, m.ptr) == detail::rt::success &&
        detail::rt::ipc_get_handle(&h.handle, base) == detail::rt::success) {
      h.ipc = 1;
      h.offset = h.address - reinterpret_cast<std::uint64_t>(base);
      h.past_end = h.offset + m.bytes > size;
    } else {
      (void)detail::rt::get_last_error(); // not IPC-capable: usable in this process only
    }
    return h;
  }

  /// Maps a peer's memory: directly, with peer access, inside one process; through IPC otherwise.
  static void* import_handle(const ipc_handle& h, int device) {
    detail::rt::check(detail::rt::set_device(device), "set device");
    if (h.process == detail::process_token()) {
      if (h.device != device) {
        int ok = 0;
        detail::rt::check(detail::rt::can_access_peer(&ok, device, h.device), "query peer access");
        if (!ok)
          throw platform_error(std::string(detail::rt::vendor) + ": GPU " + std::to_string(device) +
                               " cannot access GPU " + std::to_string(h.device) +
                               " (no peer access between them)");
        if (detail::first_peer_access(device, h.device))
          detail::rt::check(detail::rt::enable_peer_access(h.device), "enable peer access");
      }
      return reinterpret_cast<void*>(h.address);
    }
    if (!h.ipc)
      throw platform_error(std::string(detail::rt::vendor) +
                           ": memory of another process is not IPC-capable");
    if (h.past_end)
      throw platform_error(std::string(detail::rt::vendor) +
                           ": memory of another process runs past the end of its "
                           "allocation (IPC maps one allocation): register memory of one");
    const std::uint64_t peer_base = h.address - h.offset;
    std::lock_guard<std::mutex> lock(detail::ipc_mutex());
    auto& maps = detail::ipc_mappings();
    auto m = std::find_if(maps.begin(), maps.end(), [&](const detail::ipc_mapping& x) {
      return x.process == h.process && x.peer_base == peer_base && x.importer == device;
    });
    if (m == maps.end()) {
      void* base = nullptr;
      detail::rt::check(detail::rt::ipc_open(&base, h.handle), "open IPC handle of a peer");
      maps.push_back({h.process, peer_base, device, base, 0});
      m = maps.end() - 1;
    }
    ++m->refs;
    void* p = static_cast<std::byte*>(m->base) + h.offset;
    detail::ipc_opened().emplace(p, m->base);
    return p;
  }
  /// Undoes one import_handle (of memory in another process; others were never opened).
  static void close_import(void* p) {
    std::lock_guard<std::mutex> lock(detail::ipc_mutex());
    auto it = detail::ipc_opened().find(p);
    if (it == detail::ipc_opened().end()) return;
    void* base = it->second;
    detail::ipc_opened().erase(it);
    auto& maps = detail::ipc_mappings();
    auto m =
        std::find_if(maps.begin(), maps.end(), [&](const detail::ipc_mapping& x) { return x.base == base; });
    if (m != maps.end() && --m->refs == 0) {
      (void)detail::rt::ipc_close(base);
      maps.erase(m);
    }
  }

  static control_memory allocate_control(std::size_t bytes) {
    control_memory c;
    detail::rt::check(detail::rt::host_alloc_mapped(&c.host_ptr, bytes), "allocate mapped control block");
    std::memset(c.host_ptr, 0, bytes);
    detail::rt::check(detail::rt::host_device_pointer(&c.device_ptr, c.host_ptr), "map control block");
    return c;
  }
  static void release_control(control_memory& c) {
    if (c.host_ptr) (void)detail::rt::free_host(c.host_ptr);
    c = {};
  }

  /// Runs op(stream) on a stream of its own on the current device and waits for that stream
  /// alone. Not for the whole device: ranks that share a GPU in one process share its context,
  /// and a peer's kernel there may be waiting for this rank's next call. The stream is the
  /// calling thread's for that device, made at its first use (a rank's thread: while it builds
  /// its communicator) and kept: creating a stream can wait for the kernels running on the GPU
  /// (dma/gpu_proxy.hpp), so none is created per copy.
  template <class Op>
  static void on_own_stream(const char* what, Op&& op) {
    int device = 0;
    detail::rt::check(detail::rt::get_device(&device), what);
    const detail::rt::stream_t s = own_stream(device, what);
    detail::rt::error_t e = op(s);
    if (e == detail::rt::success) e = detail::rt::stream_synchronize(s);
    detail::rt::check(e, what);
  }

protected:
  /// Streams given back (destroy_stream, a helper thread's end), by GPU and priority, for
  /// create_stream and the helpers to hand out again.
  struct pooled_streams {
    std::mutex m;
    std::map<std::pair<int, int>, std::vector<detail::rt::stream_t>> free;
    detail::rt::stream_t take(int device, int priority) {
      std::lock_guard<std::mutex> lock(m);
      auto& v = free[{device, priority}];
      if (v.empty()) return {};
      const detail::rt::stream_t s = v.back();
      v.pop_back();
      return s;
    }
    void give(int device, int priority, detail::rt::stream_t s) {
      std::lock_guard<std::mutex> lock(m);
      free[{device, priority}].push_back(s);
    }
  };
  static pooled_streams& stream_pool() {
    static pooled_streams* p =
        new pooled_streams; // never destroyed: streams outlive static destructors' order
    return *p;
  }

private:
  /// The calling thread's helper stream on `device` (the current device), given back with the thread.
  static detail::rt::stream_t own_stream(int device, const char* what) {
    struct streams {
      std::map<int, detail::rt::stream_t> by_device;
      ~streams() { // kept for the next thread (stream_pool)
        for (auto& [d, s] : by_device)
          if (detail::rt::stream_synchronize(s) == detail::rt::success)
            stream_pool().give(d, 0, s);
          else
            (void)detail::rt::stream_destroy(s);
      }
    };
    thread_local streams mine;
    auto it = mine.by_device.find(device);
    if (it == mine.by_device.end()) {
      detail::rt::stream_t s = stream_pool().take(device, 0);
      if (!s) detail::rt::check(detail::rt::stream_create(&s), what);
      it = mine.by_device.emplace(device, s).first;
    }
    return it->second;
  }
};

} // namespace ark::platform
