// ark/platform/gpu_runtime.hpp: the few runtime calls ark makes, spelled once for CUDA and once
// for HIP. This file and gpu_atomics.hpp are the only places that tell the two vendors apart.
#pragma once

#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(ARK_COMPILER_CUDA)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#elif defined(ARK_COMPILER_HIP)
#include <hip/hip_runtime.h>
#else
#error "ark/platform/gpu_runtime.hpp needs nvcc or hipcc"
#endif

namespace ark::detail::rt {

#if defined(ARK_COMPILER_CUDA)
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
/// Launches k<<<grid, block, 0, s>>>(arg) as a programmatic dependent launch: its blocks may
/// become resident before the stream's previous kernel has ended (the kernel itself waits for
/// that kernel with griddepcontrol.wait before touching memory: gpu_atomics.hpp).
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
#elif defined(ARK_COMPILER_HIP)
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
inline error_t stream_destroy(stream_t s) { return hipStreamDestroy(s); }
inline error_t stream_synchronize(stream_t s) { return hipStreamSynchronize(s); }
inline error_t load_function(const void* f) {
  hipFuncAttributes a;
  return hipFuncGetAttributes(&a, f);
}
/// HIP has no programmatic dependent launch: no kernel is launched early.
inline bool built_for_sm90(const void*) { return false; }
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
inline error_t event_elapsed_ms(float* ms, event_t a, event_t b) { return hipEventElapsedTime(ms, a, b); }
inline error_t multiprocessor_count(int* n, int device) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeMultiprocessorCount, device);
}
inline error_t pci_bus_id(char* id, int len, int device) { return hipDeviceGetPCIBusId(id, len, device); }
/// The rate of the clock device code's now_ns() reads (wall_clock64()), in kHz (0 if unknown), and
/// the rate now_ns() assumes (gpu_atomics.hpp).
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
#endif

/// Throws platform_error naming the call when `e` is not success.
inline void check(error_t e, const char* what) {
  if (e != success) throw platform_error(std::string(vendor) + ": " + what + ": " + error_string(e));
}

} // namespace ark::detail::rt
