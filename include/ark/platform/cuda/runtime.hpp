// ark/platform/cuda/runtime.hpp: the CUDA spelling of the runtime calls ark makes (the names of
// ark::detail::rt). platform/hip/runtime.hpp spells the same names for HIP, and
// platform/gpu_runtime.hpp includes the one the compiler asks for: code above the platform layer
// names rt::..., never cuda*.
//
// Driver entry points (cuStreamWriteValue64, cuMemGetAddressRange, ...) are reached through
// cudaGetDriverEntryPointByVersion, never linked: a program built with ark starts on a machine
// without libcuda and fails only when it uses a GPU.
#pragma once

#if !defined(__CUDACC__)
#error "ark/platform/cuda/runtime.hpp must be compiled by nvcc"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

/// Marks the collective kernel's parameter as read-only for the whole grid, so that device code
/// may take its address without a copy into local memory.
#define ARK_GRID_CONSTANT __grid_constant__

namespace ark::detail::rt {

inline constexpr const char* vendor = "cuda";
using error_t = cudaError_t;
using stream_t = cudaStream_t;
using ipc_mem_handle_t = cudaIpcMemHandle_t;
inline constexpr error_t success = cudaSuccess;
inline const char* error_string(error_t e) { return cudaGetErrorString(e); }
inline error_t get_last_error() { return cudaGetLastError(); }
inline error_t get_device_count(int* n) { return cudaGetDeviceCount(n); }
inline error_t set_device(int d) { return cudaSetDevice(d); }
inline error_t get_device(int* d) { return cudaGetDevice(d); }
/// The GPU whose memory `p` is (device memory only).
inline error_t pointer_device(int* d, const void* p) {
  cudaPointerAttributes a{};
  const error_t e = cudaPointerGetAttributes(&a, p);
  if (e == cudaSuccess) *d = a.device;
  return e == cudaSuccess && a.type == cudaMemoryTypeDevice ? cudaSuccess : cudaErrorInvalidValue;
}
inline error_t malloc(void** p, std::size_t n) { return cudaMalloc(p, n); }
inline error_t free(void* p) { return cudaFree(p); }
inline error_t memset(void* p, int v, std::size_t n) { return cudaMemset(p, v, n); }
inline error_t device_synchronize() { return cudaDeviceSynchronize(); }
inline error_t host_alloc_mapped(void** p, std::size_t n) {
  return cudaHostAlloc(p, n, cudaHostAllocMapped | cudaHostAllocPortable);
}
inline error_t host_device_pointer(void** d, void* h) { return cudaHostGetDevicePointer(d, h, 0); }
inline error_t free_host(void* p) { return cudaFreeHost(p); }
inline error_t stream_create(stream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline error_t stream_create_priority(stream_t* s, int priority) {
  return cudaStreamCreateWithPriority(s, cudaStreamNonBlocking, priority);
}
inline error_t mem_get_info(std::size_t* free, std::size_t* total) { return cudaMemGetInfo(free, total); }
inline error_t stream_get_priority(stream_t s, int* priority) { return cudaStreamGetPriority(s, priority); }
inline error_t stream_priority_range(int* least, int* greatest) {
  return cudaDeviceGetStreamPriorityRange(least, greatest);
}
inline error_t memcpy_async(void* d, const void* s, std::size_t n, stream_t st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyDefault, st);
}
/// Stream-ordered 8-byte store, after a memory barrier over the stream's earlier work (through
/// the driver entry point, like allocation_base). `p` is a device address (or a mapped host one).
inline error_t stream_write_value(stream_t st, std::uint64_t* p, std::uint64_t v) {
  static void* fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &f, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      return static_cast<void*>(nullptr);
    return f;
  }();
  if (!fn) return cudaErrorNotSupported;
  const CUresult r = reinterpret_cast<PFN_cuStreamWriteValue64_v11070>(fn)(
      reinterpret_cast<CUstream>(st), reinterpret_cast<CUdeviceptr>(p), v, 0);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
/// Stream-ordered wait until *p == v (no SM involved: the stream's front end polls). ark's
/// collectives wait with kernels instead (collectives/copy_engine.hpp says why); bench/ark_colo
/// measures this one.
inline error_t stream_wait_value(stream_t st, const std::uint64_t* p, std::uint64_t v) {
  static void* fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &f, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      return static_cast<void*>(nullptr);
    return f;
  }();
  if (!fn) return cudaErrorNotSupported;
  const CUresult r = reinterpret_cast<PFN_cuStreamWaitValue64_v11070>(fn)(
      reinterpret_cast<CUstream>(st), reinterpret_cast<CUdeviceptr>(p), v, CU_STREAM_WAIT_VALUE_EQ);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
/// The legacy default stream by a handle other than 0, which ark reads as the communicator's own.
inline stream_t legacy_stream() { return cudaStreamLegacy; }
inline error_t stream_destroy(stream_t s) { return cudaStreamDestroy(s); }
inline error_t stream_synchronize(stream_t s) { return cudaStreamSynchronize(s); }
inline error_t stream_device(stream_t s, int* d) { return cudaStreamGetDevice(s, d); }
inline constexpr const char* hardware_queues_variable = "CUDA_DEVICE_MAX_CONNECTIONS";
inline constexpr int hardware_queues_unset = 8, hardware_queues_most = 32;
/// Loads kernel f now if lazy module loading has not yet (any query of the function does).
inline error_t load_function(const void* f) {
  cudaFuncAttributes a;
  return cudaFuncGetAttributes(&a, f);
}
/// Whether kernel f, as the current device runs it, was compiled for sm_90 or later (its PTX and
/// its machine code): only then does it contain the griddepcontrol.wait that an early launch needs.
inline bool built_for_sm90(const void* f) {
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, f) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.ptxVersion >= 90 && a.binaryVersion >= 90;
}
inline bool is_capturing(stream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}
inline error_t can_access_peer(int* ok, int d, int peer) { return cudaDeviceCanAccessPeer(ok, d, peer); }
inline error_t enable_peer_access(int peer) {
  const error_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return cudaSuccess;
  }
  return e;
}
inline error_t ipc_get_handle(ipc_mem_handle_t* h, void* p) { return cudaIpcGetMemHandle(h, p); }
inline error_t ipc_open(void** p, ipc_mem_handle_t h) {
  return cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
}
inline error_t ipc_close(void* p) { return cudaIpcCloseMemHandle(p); }
using graph_t = cudaGraph_t;
using graph_exec_t = cudaGraphExec_t;
using event_t = cudaEvent_t;
inline error_t memset_async(void* p, int v, std::size_t n, stream_t s) { return cudaMemsetAsync(p, v, n, s); }
inline error_t begin_capture(stream_t s) {
  return cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
}
inline error_t end_capture(stream_t s, graph_t* g) { return cudaStreamEndCapture(s, g); }
inline error_t graph_instantiate(graph_exec_t* e, graph_t g) { return cudaGraphInstantiate(e, g, 0); }
inline error_t graph_launch(graph_exec_t e, stream_t s) { return cudaGraphLaunch(e, s); }
/// CUDA has programmatic dependent launch (sm_90 and later; built_for_sm90 says whether a kernel
/// was built for it).
inline constexpr bool has_early_launch = true;
/// Launches k<<<grid, block, 0, s>>>(arg) as a programmatic dependent launch: its blocks may
/// become resident before the stream's previous kernel has ended (the kernel itself waits for
/// that kernel with griddepcontrol.wait before touching memory: cuda/atomics.hpp).
template <class Arg>
inline error_t launch_early(void (*k)(Arg), unsigned grid, unsigned block, stream_t s, const Arg& arg) {
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(grid);
  c.blockDim = dim3(block);
  c.stream = s;
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  c.attrs = &a;
  c.numAttrs = 1;
  return cudaLaunchKernelEx(&c, k, arg);
}
inline error_t graph_exec_destroy(graph_exec_t e) { return cudaGraphExecDestroy(e); }
inline error_t graph_destroy(graph_t g) { return cudaGraphDestroy(g); }
inline error_t event_create(event_t* e) { return cudaEventCreate(e); }
inline error_t event_create_untimed(event_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDisableTiming);
}
inline error_t stream_wait_event(stream_t s, event_t e) { return cudaStreamWaitEvent(s, e, 0); }
inline error_t event_destroy(event_t e) { return cudaEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return cudaEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return cudaEventSynchronize(e); }
inline constexpr error_t not_ready = cudaErrorNotReady;
inline error_t event_query(event_t e) { return cudaEventQuery(e); }
inline error_t event_elapsed_ms(float* ms, event_t a, event_t b) { return cudaEventElapsedTime(ms, a, b); }
inline error_t multiprocessor_count(int* n, int device) {
  return cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, device);
}
inline error_t pci_bus_id(char* id, int len, int device) { return cudaDeviceGetPCIBusId(id, len, device); }
/// The rate of the clock device code's now_ns() reads (%globaltimer: nanoseconds), in kHz, and the
/// rate now_ns() assumes.
inline constexpr std::uint64_t clock_khz_assumed = 1000000;
inline std::uint64_t clock_khz(int) { return clock_khz_assumed; }
inline std::string device_name(int device) {
  cudaDeviceProp p{};
  return cudaGetDeviceProperties(&p, device) == cudaSuccess ? p.name : "unknown";
}
inline int driver_version() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}
/// The start and size of the allocation containing p (through the driver entry point, so that programs
/// need no link against libcuda and still start on machines without a driver).
inline error_t allocation_base(void** base, std::size_t* size, void* p) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  const error_t e =
      cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &status);
  if (e != cudaSuccess || !fn || status != cudaDriverEntryPointSuccess)
    return e != cudaSuccess ? e : cudaErrorNotSupported;
  CUdeviceptr b = 0;
  const CUresult r =
      reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn)(&b, size, reinterpret_cast<CUdeviceptr>(p));
  *base = reinterpret_cast<void*>(b);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

} // namespace ark::detail::rt
