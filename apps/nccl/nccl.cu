// apps/nccl/nccl.cu: libnccl.so.2 from ark: NCCL 2.28's C API over apps/nccl/core.hpp, for CUDA
// and (as librccl.so, RCCL's API being NCCL's on HIP streams) for ROCm. Where the vendor's header is
// found (nccl.h; rccl/rccl.h), this file defines the functions it declares, so that the compiler
// checks every signature and the static_asserts below hold core.hpp's values to it; else api.h
// gives the types by NCCL's ABI (Debian ships no RCCL).
// Load it in place of NCCL's: LD_PRELOAD=.../libnccl.so.2 (PyTorch finds NCCL through an RPATH,
// which LD_LIBRARY_PATH does not override), or first on LD_LIBRARY_PATH for other programs.
// What ark does not serve (reductions of int8/uint32/uint64 other than sum and product, the 8-bit
// floats, NCCL's device API) is forwarded to the real NCCL (forward.hpp), unless
// ARK_NCCL_FALLBACK=0 forbids it.
#include "nccl/core.hpp"
#include "nccl/forward.hpp"

#if defined(ARK_COMPILER_CUDA) && __has_include(<nccl.h>)
#include <nccl.h>
#define ARK_NCCL_VENDOR_HEADER 1
#elif defined(ARK_COMPILER_HIP) && __has_include(<rccl/rccl.h>)
#include <rccl/rccl.h>
#define ARK_NCCL_VENDOR_HEADER 1
#else
#include "nccl/api.h"
#endif

#include <climits>
#include <cstddef>

namespace nc = ark::nccl;
using P = ark::platform::gpu;
using stream_t = P::stream;
using comm_t = nc::comm<P>;

// NCCL's values, which core.hpp spells out so that it compiles without NCCL's header
static_assert(static_cast<int>(nc::result::in_progress) == ncclInProgress &&
              static_cast<int>(nc::result::remote_error) == ncclRemoteError &&
              static_cast<int>(nc::result::invalid_usage) == ncclInvalidUsage &&
              static_cast<int>(nc::result::unhandled_cuda_error) == ncclUnhandledCudaError);
static_assert(static_cast<int>(nc::data_type::i8) == ncclInt8 &&
              static_cast<int>(nc::data_type::u32) == ncclUint32 &&
              static_cast<int>(nc::data_type::f16) == ncclFloat16 &&
              static_cast<int>(nc::data_type::bf16) == ncclBfloat16 &&
              static_cast<int>(nc::data_type::f8e5m2) == ncclFloat8e5m2 &&
              static_cast<int>(nc::data_type::count) == ncclNumTypes);
static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 &&
              ncclNumOps == nc::builtin_op_count && NCCL_SPLIT_NOCOLOR == nc::split_nocolor);
static_assert(static_cast<int>(nc::scalar_residence::device) == ncclScalarDevice &&
              static_cast<int>(nc::scalar_residence::host_immediate) == ncclScalarHostImmediate);
static_assert(sizeof(ncclUniqueId) == nc::id_bytes && NCCL_VERSION_CODE <= nc::version_code);

#define ARK_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

comm_t* of(ncclComm_t c) { return reinterpret_cast<comm_t*>(c); }
ncclResult_t r(nc::result x) { return static_cast<ncclResult_t>(x); }
nc::data_type dt(ncclDataType_t t) { return static_cast<nc::data_type>(t); }
nc::unique_id id_of(const ncclUniqueId& id) {
  nc::unique_id u;
  std::memcpy(u.internal, id.internal, sizeof u.internal);
  return u;
}
/// NCCL's stream 0 is the legacy default stream; ark's null stream is its own.
stream_t stream_of(stream_t s) { return s ? s : ark::detail::rt::legacy_stream(); }

/// The fields of a config of any version (its size says which it has); undefined ones keep
/// ark's defaults.
nc::comm_config config_of(const ncclConfig_t* c) {
  nc::comm_config out;
  if (!c) return out;
  auto has = [c](std::size_t offset, std::size_t bytes) { return c->size >= offset + bytes; };
  if (has(offsetof(ncclConfig_t, blocking), sizeof(int)) && c->blocking != NCCL_CONFIG_UNDEF_INT)
    out.blocking = c->blocking != 0;
  if (has(offsetof(ncclConfig_t, maxCTAs), sizeof(int)) && c->maxCTAs != NCCL_CONFIG_UNDEF_INT &&
      c->maxCTAs > 0)
    out.max_ctas = c->maxCTAs;
  if (has(offsetof(ncclConfig_t, commName), sizeof(const char*)) && c->commName) out.name = c->commName;
  return out;
}

/// A reduction ark serves (its work on ark's communicator), or one forwarded to the real NCCL (or
/// the reason neither can).
template <class Work, class Real>
ncclResult_t reduction(const char* call, ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, stream_t s,
                       Work&& work, Real&& real_call) {
  return r(nc::serve_or_forward(nc::forward<P>::get(), call, of(comm), dt(t), static_cast<int>(op),
                                stream_of(s), std::forward<Work>(work), [&](nc::real_nccl& n, void* rc) {
                                  return real_call(n, static_cast<ncclComm_t>(rc));
                                }));
}

} // namespace

// -- version and errors --------------------------------------------------------------------------
ARK_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = nc::version_code;
  return ncclSuccess;
}
ARK_EXPORT const char* ncclGetErrorString(ncclResult_t code) {
  return nc::error_string(static_cast<nc::result>(code));
}
ARK_EXPORT const char* ncclGetLastError(ncclComm_t comm) { return nc::last_error<P>(of(comm)); }
ARK_EXPORT void ncclResetDebugInit() {}

// -- communicators -------------------------------------------------------------------------------
ARK_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  const nc::unique_id u = nc::make_id();
  std::memcpy(id->internal, u.internal, sizeof u.internal);
  return ncclSuccess;
}
ARK_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t* config) {
  return r(nc::init_rank<P>(reinterpret_cast<comm_t**>(comm), nranks, id_of(id), rank, config_of(config),
                            "ncclCommInitRankConfig"));
}
ARK_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return r(nc::init_rank<P>(reinterpret_cast<comm_t**>(comm), nranks, id_of(id), rank, {}));
}
ARK_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int n_ids,
                                                 ncclUniqueId* ids, ncclConfig_t* config) {
  if (n_ids < 1 || !ids) {
    nc::last_error_text() = "ncclCommInitRankScalable: nId must be at least 1 and commIds not NULL";
    return ncclInvalidArgument;
  }
  return r(nc::init_rank<P>(reinterpret_cast<comm_t**>(comm), nranks, id_of(ids[0]), rank, config_of(config),
                            "ncclCommInitRankScalable"));
}
ARK_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return r(nc::init_all<P>(reinterpret_cast<comm_t**>(comms), ndev, devlist));
}
ARK_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                      ncclConfig_t* config) {
  return r(nc::split<P>(of(comm), color, key, reinterpret_cast<comm_t**>(newcomm), config_of(config)));
}
ARK_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int n_exclude, ncclComm_t* newcomm,
                                       ncclConfig_t* config, int) {
  return r(
      nc::shrink<P>(of(comm), exclude, n_exclude, reinterpret_cast<comm_t**>(newcomm), config_of(config)));
}
ARK_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return r(nc::guard("ncclCommFinalize", [&] {
    if (!comm) nc::fail(nc::result::invalid_argument, "ncclCommFinalize", "comm is NULL");
    if (of(comm)->ready()) of(comm)->ark("ncclCommFinalize").synchronize();
  }));
}
ARK_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  nc::forward<P>::get().release(of(comm), false);
  return r(nc::destroy<P>(of(comm), false));
}
ARK_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  nc::forward<P>::get().release(of(comm), true);
  return r(nc::destroy<P>(of(comm), true));
}
ARK_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  if (!comm) return ncclInvalidArgument;
  if (of(comm)->ready()) of(comm)->ark("ncclCommRevoke").abort();
  return ncclSuccess;
}
ARK_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  return r(nc::async_error<P>(of(comm), reinterpret_cast<nc::result*>(error)));
}
ARK_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = of(comm)->world();
  return ncclSuccess;
}
ARK_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return ncclInvalidArgument;
  *device = of(comm)->device();
  return ncclSuccess;
}
ARK_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = of(comm)->rank();
  return ncclSuccess;
}

// -- memory --------------------------------------------------------------------------------------
ARK_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) { return r(nc::mem_alloc<P>(ptr, size)); }
ARK_EXPORT ncclResult_t ncclMemFree(void* ptr) { return r(nc::mem_free<P>(ptr)); }
/// NCCL's local registration: a hint ark does not need (its staged paths take any buffer); the
/// handle is the buffer. Collective registration is the window's.
ARK_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t, void** handle) {
  if (!comm || !handle) return ncclInvalidArgument;
  *handle = buff;
  return ncclSuccess;
}
ARK_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) {
  return comm ? ncclSuccess : ncclInvalidArgument;
}
ARK_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                               int) {
  return r(nc::window_register<P>(of(comm), buff, size, reinterpret_cast<void**>(win)));
}
ARK_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return r(nc::window_deregister<P>(of(comm), win));
}

// -- ops -----------------------------------------------------------------------------------------
ARK_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t t,
                                                 ncclScalarResidence_t residence, ncclComm_t comm) {
  int made = -1;
  const nc::result x =
      nc::create_premul_sum<P>(&made, scalar, dt(t), static_cast<nc::scalar_residence>(residence), of(comm));
  if (x == nc::result::success && op) *op = static_cast<ncclRedOp_t>(made);
  return r(x);
}
ARK_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return r(nc::guard("ncclRedOpDestroy", [&] {
    if (!comm) nc::fail(nc::result::invalid_argument, "ncclRedOpDestroy", "comm is NULL");
    of(comm)->remove_op(static_cast<int>(op), "ncclRedOpDestroy");
  }));
}

// -- collectives and point-to-point --------------------------------------------------------------
ARK_EXPORT ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t t,
                                      ncclRedOp_t op, ncclComm_t comm, stream_t s) {
  return reduction(
      "ncclAllReduce", comm, t, op, s, nc::all_reduce_work<P>(in, out, count),
      [&](nc::real_nccl& n, ncclComm_t rc) { return n.all_reduce(in, out, count, t, op, rc, s); });
}
ARK_EXPORT ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t t,
                                          ncclRedOp_t op, ncclComm_t comm, stream_t s) {
  return reduction(
      "ncclReduceScatter", comm, t, op, s, nc::reduce_scatter_work<P>(in, out, count),
      [&](nc::real_nccl& n, ncclComm_t rc) { return n.reduce_scatter(in, out, count, t, op, rc, s); });
}
ARK_EXPORT ncclResult_t ncclReduce(const void* in, void* out, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                   int root, ncclComm_t comm, stream_t s) {
  return reduction(
      "ncclReduce", comm, t, op, s, nc::reduce_work<P>(in, out, count, root),
      [&](nc::real_nccl& n, ncclComm_t rc) { return n.reduce(in, out, count, t, op, root, rc, s); });
}
ARK_EXPORT ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t t,
                                      ncclComm_t comm, stream_t s) {
  return r(nc::all_gather<P>(in, out, count, dt(t), of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclBroadcast(const void* in, void* out, size_t count, ncclDataType_t t, int root,
                                      ncclComm_t comm, stream_t s) {
  return r(nc::broadcast<P>(in, out, count, dt(t), root, of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                                  stream_t s) {
  return r(nc::broadcast<P>(buff, buff, count, dt(t), root, of(comm), stream_of(s), "ncclBcast"));
}
ARK_EXPORT ncclResult_t ncclAlltoAll(const void* in, void* out, size_t count, ncclDataType_t t,
                                     ncclComm_t comm, stream_t s) {
  return r(nc::all_to_all<P>(in, out, count, dt(t), of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclGather(const void* in, void* out, size_t count, ncclDataType_t t, int root,
                                   ncclComm_t comm, stream_t s) {
  return r(nc::gather<P>(in, out, count, dt(t), root, of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclScatter(const void* in, void* out, size_t count, ncclDataType_t t, int root,
                                    ncclComm_t comm, stream_t s) {
  return r(nc::scatter<P>(in, out, count, dt(t), root, of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                 stream_t s) {
  return r(nc::send<P>(buf, count, dt(t), peer, of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                 stream_t s) {
  return r(nc::recv<P>(buf, count, dt(t), peer, of(comm), stream_of(s)));
}
ARK_EXPORT ncclResult_t ncclGroupStart() { return r(nc::group_start<P>()); }
ARK_EXPORT ncclResult_t ncclGroupEnd() { return r(nc::group_end<P>()); }
/// Ends the group without running it; ark does not model the time (estimatedTime stays undefined).
ARK_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (info) info->estimatedTime = NCCL_UNDEF_FLOAT;
  return r(nc::group_drop<P>());
}

// -- NCCL's device API (nccl_device.h): NCCL's own, forwarded where the real NCCL serves ---------
ARK_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* requirements, void* out) {
  return r(nc::forward<P>::get().run("ncclDevCommCreate", of(comm), [&](nc::real_nccl& n, void* rc) {
    return n.dev_comm_create(rc, requirements, out);
  }));
}
ARK_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* dev) {
  return r(nc::forward<P>::get().run("ncclDevCommDestroy", of(comm), [&](nc::real_nccl& n, void* rc) {
    return n.dev_comm_destroy(rc, dev);
  }));
}
