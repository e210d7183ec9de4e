// ark/platform/hip/runtime.hpp: the HIP spelling of the runtime calls ark makes (the names of
// ark::detail::rt). platform/cuda/runtime.hpp spells the same names for CUDA, and
// platform/gpu_runtime.hpp includes the one the compiler asks for: code above the platform layer
// names rt::..., never hip*.
#pragma once

#if !defined(__HIPCC__) && !defined(__HIP__)
#error "ark/platform/hip/runtime.hpp must be compiled by hipcc"
#endif

#include <hip/hip_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

/// CUDA's __grid_constant__ has no HIP spelling: kernel parameters stay as HIP passes them.
#define ARK_GRID_CONSTANT

namespace ark::detail::rt {

inline constexpr const char* vendor = "hip";
using error_t = hipError_t;
using stream_t = hipStream_t;
using ipc_mem_handle_t = hipIpcMemHandle_t;
inline constexpr error_t success = hipSuccess;
inline const char* error_string(error_t e) { return hipGetErrorString(e); }
inline error_t get_last_error() { return hipGetLastError(); }
inline error_t get_device_count(int* n) { return hipGetDeviceCount(n); }
inline error_t set_device(int d) { return hipSetDevice(d); }
inline error_t get_device(int* d) { return hipGetDevice(d); }
inline error_t pointer_device(int* d, const void* p) {
  hipPointerAttribute_t a{};
  const error_t e = hipPointerGetAttributes(&a, p);
  if (e == hipSuccess) *d = a.device;
  return e;
}
inline error_t malloc(void** p, std::size_t n) { return hipMalloc(p, n); }
inline error_t free(void* p) { return hipFree(p); }
inline error_t memset(void* p, int v, std::size_t n) { return hipMemset(p, v, n); }
inline error_t device_synchronize() { return hipDeviceSynchronize(); }
inline error_t host_alloc_mapped(void** p, std::size_t n) {
  return hipHostMalloc(p, n, hipHostMallocMapped | hipHostMallocPortable);
}
inline error_t host_device_pointer(void** d, void* h) { return hipHostGetDevicePointer(d, h, 0); }
inline error_t free_host(void* p) { return hipHostFree(p); }
inline error_t stream_create(stream_t* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline error_t stream_create_priority(stream_t* s, int priority) {
  return hipStreamCreateWithPriority(s, hipStreamNonBlocking, priority);
}
inline error_t mem_get_info(std::size_t* free, std::size_t* total) { return hipMemGetInfo(free, total); }
inline error_t stream_get_priority(stream_t s, int* priority) { return hipStreamGetPriority(s, priority); }
inline error_t stream_priority_range(int* least, int* greatest) {
  return hipDeviceGetStreamPriorityRange(least, greatest);
}
inline error_t memcpy_async(void* d, const void* s, std::size_t n, stream_t st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyDefault, st);
}
/// Stream-ordered 8-byte store after the stream's earlier work.
inline error_t stream_write_value(stream_t st, std::uint64_t* p, std::uint64_t v) {
  return hipStreamWriteValue64(st, p, v, 0);
}
/// Stream-ordered wait until *p == v.
inline error_t stream_wait_value(stream_t st, const std::uint64_t* p, std::uint64_t v) {
  return hipStreamWaitValue64(st, const_cast<std::uint64_t*>(p), v, hipStreamWaitValueEq);
}
/// The null stream by a handle other than 0, which ark reads as the communicator's own: HIP's
/// legacy handle where the headers have one, else the per-thread stream, which (being blocking)
/// is ordered with the null stream both ways.
inline stream_t legacy_stream() {
#if defined(hipStreamLegacy)
  return hipStreamLegacy;
#else
  return hipStreamPerThread;
#endif
}
inline error_t stream_destroy(stream_t s) { return hipStreamDestroy(s); }
inline error_t stream_synchronize(stream_t s) { return hipStreamSynchronize(s); }
inline error_t load_function(const void* f) {
  hipFuncAttributes a;
  return hipFuncGetAttributes(&a, f);
}
/// HIP has no programmatic dependent launch: no kernel is launched early. platform::gpu::launch
/// never calls launch_early while has_early_launch is false (and built_for_sm90 is false too);
/// launch_early exists so that the one launch path compiles for both vendors, and it refuses.
inline constexpr bool has_early_launch = false;
inline bool built_for_sm90(const void*) { return false; }
template <class Arg>
inline error_t launch_early(void (*)(Arg), unsigned, unsigned, stream_t, const Arg&) {
  return hipErrorNotSupported;
}
inline constexpr const char* hardware_queues_variable = "GPU_MAX_HW_QUEUES";
inline constexpr int hardware_queues_unset = 4, hardware_queues_most = 1 << 20; // no documented bound
inline error_t stream_device(stream_t s, int* d) {
  *d = hipGetStreamDeviceId(s);
  return *d < 0 ? hipErrorInvalidHandle : hipSuccess;
}
inline bool is_capturing(stream_t s) {
  hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
  return hipStreamIsCapturing(s, &st) == hipSuccess && st != hipStreamCaptureStatusNone;
}
inline error_t can_access_peer(int* ok, int d, int peer) { return hipDeviceCanAccessPeer(ok, d, peer); }
inline error_t enable_peer_access(int peer) {
  const error_t e = hipDeviceEnablePeerAccess(peer, 0);
  if (e == hipErrorPeerAccessAlreadyEnabled) {
    (void)hipGetLastError();
    return hipSuccess;
  }
  return e;
}
inline error_t ipc_get_handle(ipc_mem_handle_t* h, void* p) { return hipIpcGetMemHandle(h, p); }
inline error_t ipc_open(void** p, ipc_mem_handle_t h) {
  return hipIpcOpenMemHandle(p, h, hipIpcMemLazyEnablePeerAccess);
}
inline error_t ipc_close(void* p) { return hipIpcCloseMemHandle(p); }
inline error_t allocation_base(void** base, std::size_t* size, void* p) {
  return hipMemGetAddressRange(base, size, p);
}
using graph_t = hipGraph_t;
using graph_exec_t = hipGraphExec_t;
using event_t = hipEvent_t;
inline error_t memset_async(void* p, int v, std::size_t n, stream_t s) { return hipMemsetAsync(p, v, n, s); }
inline error_t begin_capture(stream_t s) { return hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal); }
inline error_t end_capture(stream_t s, graph_t* g) { return hipStreamEndCapture(s, g); }
inline error_t graph_instantiate(graph_exec_t* e, graph_t g) {
  return hipGraphInstantiate(e, g, nullptr, nullptr, 0);
}
inline error_t graph_launch(graph_exec_t e, stream_t s) { return hipGraphLaunch(e, s); }
inline error_t graph_exec_destroy(graph_exec_t e) { return hipGraphExecDestroy(e); }
inline error_t graph_destroy(graph_t g) { return hipGraphDestroy(g); }
inline error_t event_create(event_t* e) { return hipEventCreate(e); }
inline error_t event_create_untimed(event_t* e) { return hipEventCreateWithFlags(e, hipEventDisableTiming); }
inline error_t stream_wait_event(stream_t s, event_t e) { return hipStreamWaitEvent(s, e, 0); }
inline error_t event_destroy(event_t e) { return hipEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return hipEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return hipEventSynchronize(e); }
inline constexpr error_t not_ready = hipErrorNotReady;
inline error_t event_query(event_t e) { return hipEventQuery(e); }
inline error_t event_elapsed_ms(float* ms, event_t a, event_t b) { return hipEventElapsedTime(ms, a, b); }
inline error_t multiprocessor_count(int* n, int device) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeMultiprocessorCount, device);
}
inline error_t pci_bus_id(char* id, int len, int device) { return hipDeviceGetPCIBusId(id, len, device); }
/// The rate of the clock device code's now_ns() reads (wall_clock64()), in kHz (0 if unknown), and
/// the rate now_ns() assumes (hip/atomics.hpp).
inline constexpr std::uint64_t clock_khz_assumed = 100000;
/// 0 (the rate assumed) where HIP has no hipDeviceAttributeWallClockRate (Debian's HIP 5.2).
template <class Attribute>
std::uint64_t wall_clock_khz(int device) {
  if constexpr (requires { Attribute::hipDeviceAttributeWallClockRate; }) {
    int khz = 0;
    const auto a = static_cast<hipDeviceAttribute_t>(Attribute::hipDeviceAttributeWallClockRate);
    if (hipDeviceGetAttribute(&khz, a, device) != hipSuccess) {
      (void)hipGetLastError();
      return 0;
    }
    return khz > 0 ? static_cast<std::uint64_t>(khz) : 0;
  } else {
    (void)device;
    return 0;
  }
}
inline std::uint64_t clock_khz(int device) { return wall_clock_khz<hipDeviceAttribute_t>(device); }
inline std::string device_name(int device) {
  hipDeviceProp_t p{};
  return hipGetDeviceProperties(&p, device) == hipSuccess ? p.name : "unknown";
}
inline int driver_version() {
  int v = 0;
  return hipDriverGetVersion(&v) == hipSuccess ? v : 0;
}

} // namespace ark::detail::rt
