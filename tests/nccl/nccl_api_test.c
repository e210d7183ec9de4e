/* tests/nccl/nccl_api_test.c: an NCCL program in C, using nccl.h and the CUDA runtime alone, that
 * checks every call, data type and op against a reference. It runs on any libnccl.so.2: ark's
 * (apps/nccl; with ARK_NCCL_FALLBACK=0 it expects ark to refuse exactly what ark does not
 * reduce) or NCCL's.
 *
 *   nccl_api_test --world N              ranks as threads of this process (ncclCommInitAll)
 *   nccl_api_test --world N --processes  one process per rank (ncclGetUniqueId, then
 *                                        ncclCommInitRankConfig in each, non-blocking config)
 * Ranks use GPU rank % (GPU count): with more ranks than GPUs they share one (NCCL refuses that).
 * Prints one line per rank and exits non-zero on any failure. */
#include <nccl.h>
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char** environ;

#define N_TYPES 12
static const char* type_names[N_TYPES] = {"int8",    "uint8",    "int32",      "uint32",
                                          "int64",   "uint64",   "float16",    "float32",
                                          "float64", "bfloat16", "float8e4m3", "float8e5m2"};
static const size_t type_sizes[N_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

struct rank_state {
  int rank, world, device;
  ncclComm_t comm;
  cudaStream_t stream;
  char* arena; /* the device memory of its checks */
  size_t used;
  int failures, checks, refused;
  char first[512];
};

static void fail_at(struct rank_state* s, const char* what) {
  if (!s->failures) snprintf(s->first, sizeof s->first, "%s", what);
  s->failures++;
}
#define CHECK(s, cond, ...)                                                                                  \
  do {                                                                                                       \
    (s)->checks++;                                                                                           \
    if (!(cond)) {                                                                                           \
      char m_[400];                                                                                          \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                                                  \
      fail_at((s), m_);                                                                                      \
    }                                                                                                        \
  } while (0)
#define CUDA(x)                                                                                              \
  do {                                                                                                       \
    cudaError_t e_ = (x);                                                                                    \
    if (e_ != cudaSuccess) {                                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                    \
      exit(2);                                                                                               \
    }                                                                                                        \
  } while (0)

/* -- values: small integers, exact in every type (8-bit floats included up to 16) ------------- */
static double value(int r, size_t i) { return (double)((r * 5 + i * 3) % 3 + 1); }

static uint16_t to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((exp - 127 + 15) << 10) | (man >> 13));
}
static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, x;
  float f;
  if (exp == 0 && man == 0)
    x = sign;
  else if (exp == 0) { /* subnormal */
    f = ldexpf((float)man, -24);
    return sign ? -f : f;
  } else
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  memcpy(&f, &x, 4);
  return f;
}
/* 8-bit floats of small non-negative values: e4m3 (bias 7, 3 mantissa bits), e5m2 (bias 15, 2) */
static uint8_t to_f8(double v, int man_bits, int bias) {
  if (v == 0) return 0;
  int e;
  double m = frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
  int exp = e - 1 + bias;
  int man = (int)lround((m * 2 - 1) * (1 << man_bits));
  if (man == (1 << man_bits)) man = 0, exp++;
  return (uint8_t)((exp << man_bits) | man);
}
static double from_f8(uint8_t b, int man_bits, int bias) {
  int exp = (b >> man_bits) & ((1 << (7 - man_bits)) - 1), man = b & ((1 << man_bits) - 1);
  if (exp == 0) return ldexp(man, 1 - bias - man_bits);
  return ldexp(1.0 + (double)man / (1 << man_bits), exp - bias);
}

static void put(int t, void* p, size_t i, double v) {
  char* b = (char*)p + i * type_sizes[t];
  switch (t) {
  case ncclInt8: {
    int8_t x = (int8_t)v;
    memcpy(b, &x, 1);
    break;
  }
  case ncclUint8: {
    uint8_t x = (uint8_t)v;
    memcpy(b, &x, 1);
    break;
  }
  case ncclInt32: {
    int32_t x = (int32_t)v;
    memcpy(b, &x, 4);
    break;
  }
  case ncclUint32: {
    uint32_t x = (uint32_t)v;
    memcpy(b, &x, 4);
    break;
  }
  case ncclInt64: {
    int64_t x = (int64_t)v;
    memcpy(b, &x, 8);
    break;
  }
  case ncclUint64: {
    uint64_t x = (uint64_t)v;
    memcpy(b, &x, 8);
    break;
  }
  case ncclFloat16: {
    uint16_t x = to_half((float)v);
    memcpy(b, &x, 2);
    break;
  }
  case ncclFloat32: {
    float x = (float)v;
    memcpy(b, &x, 4);
    break;
  }
  case ncclFloat64:
    memcpy(b, &v, 8);
    break;
  case ncclBfloat16: {
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t h = (uint16_t)(x >> 16);
    memcpy(b, &h, 2);
    break;
  }
  case ncclFloat8e4m3: {
    uint8_t x = to_f8(v, 3, 7);
    memcpy(b, &x, 1);
    break;
  }
  default: {
    uint8_t x = to_f8(v, 2, 15);
    memcpy(b, &x, 1);
    break;
  }
  }
}
static double get(int t, const void* p, size_t i) {
  const char* b = (const char*)p + i * type_sizes[t];
  switch (t) {
  case ncclInt8: {
    int8_t x;
    memcpy(&x, b, 1);
    return x;
  }
  case ncclUint8: {
    uint8_t x;
    memcpy(&x, b, 1);
    return x;
  }
  case ncclInt32: {
    int32_t x;
    memcpy(&x, b, 4);
    return x;
  }
  case ncclUint32: {
    uint32_t x;
    memcpy(&x, b, 4);
    return x;
  }
  case ncclInt64: {
    int64_t x;
    memcpy(&x, b, 8);
    return (double)x;
  }
  case ncclUint64: {
    uint64_t x;
    memcpy(&x, b, 8);
    return (double)x;
  }
  case ncclFloat16: {
    uint16_t x;
    memcpy(&x, b, 2);
    return from_half(x);
  }
  case ncclFloat32: {
    float x;
    memcpy(&x, b, 4);
    return x;
  }
  case ncclFloat64: {
    double x;
    memcpy(&x, b, 8);
    return x;
  }
  case ncclBfloat16: {
    uint16_t h;
    memcpy(&h, b, 2);
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
  }
  case ncclFloat8e4m3: {
    uint8_t x;
    memcpy(&x, b, 1);
    return from_f8(x, 3, 7);
  }
  default: {
    uint8_t x;
    memcpy(&x, b, 1);
    return from_f8(x, 2, 15);
  }
  }
}
static int is_float(int t) { return t >= ncclFloat16; }

static double reduced(int op, int t, int world, size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < world; ++r) {
    double v = value(r, i);
    acc = op == ncclProd ? acc * v : op == ncclMax ? fmax(acc, v) : op == ncclMin ? fmin(acc, v) : acc + v;
  }
  if (op == ncclAvg) acc = is_float(t) ? acc / world : trunc(acc / world);
  return acc;
}
static int close_to(double got, double want, int t) {
  double tol = t >= ncclFloat8e4m3 ? 0.15 : is_float(t) ? 0.01 : 0;
  return fabs(got - want) <= tol * fabs(want) + (is_float(t) ? 1e-6 : 0);
}

/* whether NCCL refuses type t with op (its 8-bit floats take no average) */
static int nccl_refuses(int t, int op) { return t >= ncclFloat8e4m3 && op == ncclAvg; }
/* whether the library refuses type t with op: NCCL's refusals, and with ark's fallback forbidden
 * what ark does not reduce */
static int refuses(int t, int op) {
  if (nccl_refuses(t, op)) return 1;
  const char* f = getenv("ARK_NCCL_FALLBACK");
  if (!f || strcmp(f, "0") != 0) return 0;
  if (t >= ncclFloat8e4m3) return 1;
  if (t == ncclUint32 || t == ncclUint64) return op != ncclSum && op != ncclProd;
  return 0;
}

/* Each rank's device buffers come from one allocation, and its stream is made, before the ranks
 * start, and neither is freed between calls: cudaFree waits for the device, and making a stream can
 * wait for the kernels running in the context, so with ranks as threads sharing a GPU either could
 * wait on another rank's collective that waits for this rank's next call (docs/guide.md, "Ranks that share
 * a GPU"). NCCL states the same rule: no device-synchronizing call between the calls of ranks that
 * share a device. */
#define ARENA_BYTES ((size_t)64 << 20)
static void* dev_alloc(struct rank_state* s, size_t bytes) {
  size_t at = (s->used + 255) & ~(size_t)255;
  if (at + bytes > ARENA_BYTES) {
    fprintf(stderr, "nccl_api_test: rank %d: arena of %zu bytes exhausted\n", s->rank, ARENA_BYTES);
    exit(2);
  }
  s->used = at + bytes;
  return s->arena + at;
}
static void* dev_filled(struct rank_state* s, int t, size_t n, int r, size_t offset) {
  size_t bytes = n * type_sizes[t] + 1;
  char* h = malloc(bytes);
  for (size_t i = 0; i < n; ++i) put(t, h, i, value(r, i + offset));
  void* d = dev_alloc(s, bytes);
  CUDA(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s->stream));
  CUDA(cudaStreamSynchronize(s->stream));
  free(h);
  return d;
}
static void* dev_poisoned(struct rank_state* s, size_t bytes) {
  void* d = dev_alloc(s, bytes + 1);
  CUDA(cudaMemsetAsync(d, 0x5a, bytes + 1, s->stream));
  return d;
}
/* The stream is synchronized before a copy into pageable memory, never the copy enqueued behind
 * a collective: the driver stages such a copy on the calling thread, which waits there for the
 * stream's earlier work while holding the context, so the other ranks' threads, sharing the
 * context, cannot launch their part of the collective it waits for (docs/guide.md, "Ranks that share a
 * GPU"). Pinned memory has no such wait. */
static char* host_copy(struct rank_state* s, const void* d, size_t bytes) {
  char* h = malloc(bytes + 1);
  CUDA(cudaStreamSynchronize(s->stream));
  CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s->stream));
  CUDA(cudaStreamSynchronize(s->stream));
  return h;
}

static void check_reductions(struct rank_state* s, size_t n) {
  for (int t = 0; t < N_TYPES; ++t)
    for (int op = 0; op < ncclNumOps; ++op) {
      const size_t b = type_sizes[t];
      void* in = dev_filled(s, t, n, s->rank, 0);
      void* out = dev_poisoned(s, n * b);
      ncclResult_t res = ncclAllReduce(in, out, n, (ncclDataType_t)t, (ncclRedOp_t)op, s->comm, s->stream);
      if (refuses(t, op)) {
        CHECK(s, res == ncclInvalidUsage || res == ncclInvalidArgument,
              "AllReduce %s op %d: expected a refusal, got %d", type_names[t], op, res);
        s->refused += !nccl_refuses(t, op);
        char* h = host_copy(s, out, n * b);
        CHECK(s, (unsigned char)h[0] == 0x5a, "AllReduce %s op %d: refused but wrote its output",
              type_names[t], op);
        free(h);
        continue;
      }
      CHECK(s, res == ncclSuccess, "AllReduce %s op %d: %s (%s)", type_names[t], op, ncclGetErrorString(res),
            ncclGetLastError(s->comm));
      char* h = host_copy(s, out, n * b);
      for (size_t i = 0; i < n; ++i)
        if (!close_to(get(t, h, i), reduced(op, t, s->world, i), t)) {
          CHECK(s, 0, "AllReduce %s op %d: element %zu is %g, expected %g", type_names[t], op, i,
                get(t, h, i), reduced(op, t, s->world, i));
          break;
        }
      free(h);
      /* ReduceScatter: block `rank` of the reduced world blocks; Reduce to the last rank, in place */
      void* rs_in = dev_filled(s, t, n * s->world, s->rank, 0);
      res = ncclReduceScatter(rs_in, out, n, (ncclDataType_t)t, (ncclRedOp_t)op, s->comm, s->stream);
      CHECK(s, res == ncclSuccess, "ReduceScatter %s op %d: %s", type_names[t], op,
            ncclGetLastError(s->comm));
      h = host_copy(s, out, n * b);
      for (size_t i = 0; i < n; ++i)
        if (!close_to(get(t, h, i), reduced(op, t, s->world, s->rank * n + i), t)) {
          CHECK(s, 0, "ReduceScatter %s op %d: element %zu wrong", type_names[t], op, i);
          break;
        }
      free(h);
      const int root = s->world - 1;
      res = ncclReduce(in, in, n, (ncclDataType_t)t, (ncclRedOp_t)op, root, s->comm, s->stream);
      CHECK(s, res == ncclSuccess, "Reduce %s op %d: %s", type_names[t], op, ncclGetLastError(s->comm));
      h = host_copy(s, in, n * b);
      if (s->rank == root)
        for (size_t i = 0; i < n; ++i)
          if (!close_to(get(t, h, i), reduced(op, t, s->world, i), t)) {
            CHECK(s, 0, "Reduce %s op %d: element %zu wrong", type_names[t], op, i);
            break;
          }
      free(h);
    }
}

static void check_movement(struct rank_state* s, size_t n) {
  const int W = s->world, R = s->rank, root = W / 2;
  for (int t = 0; t < N_TYPES; ++t) {
    const size_t b = type_sizes[t];
    void* in = dev_filled(s, t, n * W, R, 0);
    void* out = dev_poisoned(s, n * W * b);
    CHECK(s, ncclAllGather(in, out, n, (ncclDataType_t)t, s->comm, s->stream) == ncclSuccess,
          "AllGather %s: %s", type_names[t], ncclGetLastError(s->comm));
    char* h = host_copy(s, out, n * W * b);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < n; i += 7)
        if (get(t, h, p * n + i) != value(p, i)) {
          CHECK(s, 0, "AllGather %s: block %d element %zu wrong", type_names[t], p, i);
          p = W;
          break;
        }
    free(h);
    CHECK(s, ncclAlltoAll(in, out, n, (ncclDataType_t)t, s->comm, s->stream) == ncclSuccess,
          "AlltoAll %s: %s", type_names[t], ncclGetLastError(s->comm));
    h = host_copy(s, out, n * W * b);
    for (int q = 0; q < W; ++q)
      for (size_t i = 0; i < n; i += 7)
        if (get(t, h, q * n + i) != value(q, R * n + i)) {
          CHECK(s, 0, "AlltoAll %s: block %d element %zu wrong", type_names[t], q, i);
          q = W;
          break;
        }
    free(h);
    void* bc = R == root ? dev_filled(s, t, n, R, 0) : dev_poisoned(s, n * b);
    CHECK(s, ncclBcast(bc, n, (ncclDataType_t)t, root, s->comm, s->stream) == ncclSuccess, "Bcast %s: %s",
          type_names[t], ncclGetLastError(s->comm));
    CHECK(s, ncclBroadcast(bc, out, n, (ncclDataType_t)t, root, s->comm, s->stream) == ncclSuccess,
          "Broadcast %s", type_names[t]);
    h = host_copy(s, out, n * b);
    for (size_t i = 0; i < n; i += 5)
      if (get(t, h, i) != value(root, i)) {
        CHECK(s, 0, "Broadcast %s: element %zu wrong", type_names[t], i);
        break;
      }
    free(h);
    CHECK(s, ncclGather(in, out, n, (ncclDataType_t)t, root, s->comm, s->stream) == ncclSuccess,
          "Gather %s: %s", type_names[t], ncclGetLastError(s->comm));
    h = host_copy(s, out, n * W * b);
    if (R == root)
      for (int p = 0; p < W; ++p)
        if (get(t, h, p * n + 3) != value(p, 3)) CHECK(s, 0, "Gather %s: block %d wrong", type_names[t], p);
    free(h);
    CHECK(s, ncclScatter(in, out, n, (ncclDataType_t)t, root, s->comm, s->stream) == ncclSuccess,
          "Scatter %s: %s", type_names[t], ncclGetLastError(s->comm));
    h = host_copy(s, out, n * b);
    if (get(t, h, 3) != value(root, R * n + 3)) CHECK(s, 0, "Scatter %s: wrong", type_names[t]);
    free(h);
    /* a ring shift in one group, receive first */
    const int next = (R + 1) % W, prev = (R + W - 1) % W;
    CHECK(s, ncclGroupStart() == ncclSuccess, "GroupStart");
    CHECK(s, ncclRecv(out, n, (ncclDataType_t)t, prev, s->comm, s->stream) == ncclSuccess, "Recv %s",
          type_names[t]);
    CHECK(s, ncclSend(in, n, (ncclDataType_t)t, next, s->comm, s->stream) == ncclSuccess, "Send %s",
          type_names[t]);
    CHECK(s, ncclGroupEnd() == ncclSuccess, "GroupEnd (send/recv %s): %s", type_names[t],
          ncclGetLastError(s->comm));
    h = host_copy(s, out, n * b);
    for (size_t i = 0; i < n; i += 3)
      if (get(t, h, i) != value(prev, i)) {
        CHECK(s, 0, "Send/Recv %s: element %zu wrong", type_names[t], i);
        break;
      }
    free(h);
  }
}

/* PreMulSum, split, window registration, graph capture, communicator queries */
static void check_rest(struct rank_state* s) {
  int v = 0, n = 0;
  CHECK(s, ncclGetVersion(&v) == ncclSuccess && v >= 22809, "GetVersion %d", v);
  CHECK(s, ncclCommCount(s->comm, &n) == ncclSuccess && n == s->world, "CommCount %d", n);
  CHECK(s, ncclCommUserRank(s->comm, &n) == ncclSuccess && n == s->rank, "CommUserRank %d", n);
  CHECK(s, ncclCommCuDevice(s->comm, &n) == ncclSuccess && n == s->device, "CommCuDevice %d", n);
  /* PreMulSum by value: 0.5 * sum */
  float half = 0.5f;
  ncclRedOp_t op;
  CHECK(s, ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, s->comm) == ncclSuccess,
        "RedOpCreatePreMulSum: %s", ncclGetLastError(s->comm));
  const size_t cnt = 4096;
  float* in = dev_filled(s, ncclFloat32, cnt, s->rank, 0);
  float* out = dev_poisoned(s, cnt * 4);
  CHECK(s, ncclAllReduce(in, out, cnt, ncclFloat32, op, s->comm, s->stream) == ncclSuccess,
        "AllReduce PreMulSum: %s", ncclGetLastError(s->comm));
  char* h = host_copy(s, out, cnt * 4);
  for (size_t i = 0; i < cnt; i += 11)
    if (!close_to(get(ncclFloat32, h, i), 0.5 * reduced(ncclSum, ncclFloat32, s->world, i), ncclFloat32)) {
      CHECK(s, 0, "AllReduce PreMulSum: element %zu wrong", i);
      break;
    }
  free(h);
  CHECK(s, ncclRedOpDestroy(op, s->comm) == ncclSuccess, "RedOpDestroy");
  /* one communicator's collectives in one group, as PyTorch coalesces them (ark batches like calls
   * into one launch): all-reduces of 1, 1000 and 65537 floats (the middle one in place), an
   * all-gather, and a ring shift listed between them */
  {
    const size_t counts[3] = {1, 1000, 65537};
    float *ar_in[3], *ar_out[3];
    for (int k = 0; k < 3; ++k) {
      ar_in[k] = dev_filled(s, ncclFloat32, counts[k], s->rank, 0);
      ar_out[k] = k == 1 ? ar_in[k] : dev_poisoned(s, counts[k] * 4);
    }
    const size_t g = 300;
    const int W = s->world, next = (s->rank + 1) % W, prev = (s->rank + W - 1) % W;
    float* ag_in = dev_filled(s, ncclFloat32, g, s->rank, 0);
    float* ag_out = dev_poisoned(s, g * W * 4);
    float* shift = dev_poisoned(s, g * 4);
    CHECK(s, ncclGroupStart() == ncclSuccess, "GroupStart");
    for (int k = 0; k < 3; ++k) {
      CHECK(s,
            ncclAllReduce(ar_in[k], ar_out[k], counts[k], ncclFloat32, ncclSum, s->comm, s->stream) ==
                ncclSuccess,
            "grouped AllReduce %d: %s", k, ncclGetLastError(s->comm));
      if (k == 1) {
        CHECK(s, ncclSend(ag_in, g, ncclFloat32, next, s->comm, s->stream) == ncclSuccess, "grouped Send");
        CHECK(s, ncclRecv(shift, g, ncclFloat32, prev, s->comm, s->stream) == ncclSuccess, "grouped Recv");
      }
    }
    CHECK(s, ncclAllGather(ag_in, ag_out, g, ncclFloat32, s->comm, s->stream) == ncclSuccess,
          "grouped AllGather: %s", ncclGetLastError(s->comm));
    CHECK(s, ncclGroupEnd() == ncclSuccess, "GroupEnd of one communicator's collectives: %s",
          ncclGetLastError(s->comm));
    for (int k = 0; k < 3; ++k) {
      h = host_copy(s, ar_out[k], counts[k] * 4);
      for (size_t i = 0; i < counts[k]; ++i)
        if (!close_to(get(ncclFloat32, h, i), reduced(ncclSum, ncclFloat32, W, i), ncclFloat32)) {
          CHECK(s, 0, "grouped AllReduce %d: element %zu is %g, expected %g", k, i, get(ncclFloat32, h, i),
                reduced(ncclSum, ncclFloat32, W, i));
          break;
        }
      free(h);
    }
    h = host_copy(s, ag_out, g * W * 4);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < g; ++i)
        if (get(ncclFloat32, h, p * g + i) != value(p, i)) {
          CHECK(s, 0, "grouped AllGather: block %d element %zu wrong", p, i);
          p = W;
          break;
        }
    free(h);
    h = host_copy(s, shift, g * 4);
    for (size_t i = 0; i < g; ++i)
      if (get(ncclFloat32, h, i) != value(prev, i)) {
        CHECK(s, 0, "grouped Send/Recv: element %zu wrong", i);
        break;
      }
    free(h);
  }
  /* graph capture: an in-place all-reduce captured once, replayed on fresh inputs */
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA(cudaStreamSynchronize(s->stream));
  CUDA(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
  ncclResult_t res = ncclAllReduce(out, out, cnt, ncclFloat32, ncclSum, s->comm, s->stream);
  CUDA(cudaStreamEndCapture(s->stream, &graph));
  CHECK(s, res == ncclSuccess, "AllReduce under capture: %s", ncclGetLastError(s->comm));
  CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 1; rep <= 2; ++rep) {
    float* fresh = dev_filled(s, ncclFloat32, cnt, s->rank + rep, 0);
    CUDA(cudaMemcpyAsync(out, fresh, cnt * 4, cudaMemcpyDeviceToDevice, s->stream));
    CUDA(cudaGraphLaunch(exec, s->stream));
    h = host_copy(s, out, cnt * 4);
    double want = 0;
    for (int r = 0; r < s->world; ++r) want += value(r + rep, 9);
    CHECK(s, get(ncclFloat32, h, 9) == want, "graph replay %d: %g, expected %g", rep, get(ncclFloat32, h, 9),
          want);
    free(h);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  /* a window over ncclMemAlloc memory */
  void* mem = NULL;
  ncclWindow_t win;
  CHECK(s, ncclMemAlloc(&mem, 1 << 20) == ncclSuccess, "MemAlloc");
  CHECK(s, ncclCommWindowRegister(s->comm, mem, 1 << 20, &win, NCCL_WIN_DEFAULT) == ncclSuccess,
        "CommWindowRegister: %s", ncclGetLastError(s->comm));
  CUDA(cudaMemcpyAsync(mem, in, cnt * 4, cudaMemcpyDeviceToDevice, s->stream));
  CHECK(s, ncclAllReduce(mem, mem, cnt, ncclFloat32, ncclMax, s->comm, s->stream) == ncclSuccess,
        "AllReduce on a window: %s", ncclGetLastError(s->comm));
  h = host_copy(s, mem, cnt * 4);
  CHECK(s, get(ncclFloat32, h, 5) == reduced(ncclMax, ncclFloat32, s->world, 5),
        "AllReduce on a window: wrong");
  free(h);
  CHECK(s, ncclCommWindowDeregister(s->comm, win) == ncclSuccess, "CommWindowDeregister");
  CHECK(s, ncclMemFree(mem) == ncclSuccess, "MemFree");
  /* split: even and odd ranks */
  ncclComm_t half_comm = NULL;
  CHECK(s, ncclCommSplit(s->comm, s->rank % 2, s->rank, &half_comm, NULL) == ncclSuccess, "CommSplit: %s",
        ncclGetLastError(s->comm));
  if (half_comm) {
    int32_t one = 1, *d1 = dev_alloc(s, 4);
    CUDA(cudaMemcpyAsync(d1, &one, 4, cudaMemcpyHostToDevice, s->stream));
    CHECK(s, ncclAllReduce(d1, d1, 1, ncclInt32, ncclSum, half_comm, s->stream) == ncclSuccess,
          "AllReduce on a split");
    CUDA(cudaStreamSynchronize(s->stream)); /* before a pageable copy: see host_copy */
    CUDA(cudaMemcpyAsync(&one, d1, 4, cudaMemcpyDeviceToHost, s->stream));
    CUDA(cudaStreamSynchronize(s->stream));
    ncclResult_t half_async = ncclInternalError;
    (void)ncclCommGetAsyncError(half_comm, &half_async);
    CHECK(s, one == (s->world + (s->rank % 2 ? 0 : 1)) / 2,
          "split: %d ranks of color %d (async error %d: %s)", one, s->rank % 2, (int)half_async,
          ncclGetLastError(half_comm));
    CHECK(s, half_async == ncclSuccess, "split: async error %d: %s", (int)half_async,
          ncclGetLastError(half_comm));
    ncclCommDestroy(half_comm);
  }
  ncclResult_t async = ncclInternalError;
  CHECK(s, ncclCommGetAsyncError(s->comm, &async) == ncclSuccess && async == ncclSuccess,
        "CommGetAsyncError %d", async);
}

static void* run_rank(void* p) {
  struct rank_state* s = p;
  CUDA(cudaSetDevice(s->device));
  check_reductions(s, 1000);
  check_reductions(s, 3);
  check_movement(s, 1001);
  check_rest(s);
  CUDA(cudaStreamSynchronize(s->stream));
  CHECK(s, ncclCommFinalize(s->comm) == ncclSuccess, "CommFinalize");
  printf("rank %d of %d: %d checks, %d failed, %d refused by ark%s%s\n", s->rank, s->world, s->checks,
         s->failures, s->refused, s->failures ? "; first: " : "", s->failures ? s->first : "");
  fflush(stdout);
  return NULL;
}

static int gpus(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

int main(int argc, char** argv) {
  int world = 2, processes = 0, rank = -1;
  const char* id_hex = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--world") && i + 1 < argc)
      world = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--processes"))
      processes = 1;
    else if (!strcmp(argv[i], "--rank") && i + 1 < argc)
      rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--id") && i + 1 < argc)
      id_hex = argv[++i];
  }
  if (world < 1) return 64;
  if (rank >= 0 && id_hex) { /* one rank of --processes */
    ncclUniqueId id;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
      unsigned x;
      sscanf(id_hex + 2 * i, "%2x", &x);
      id.internal[i] = (char)x;
    }
    struct rank_state s = {.rank = rank, .world = world, .device = rank % gpus()};
    CUDA(cudaSetDevice(s.device));
    CUDA(cudaMalloc((void**)&s.arena, ARENA_BYTES));
    CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t res = ncclCommInitRankConfig(&s.comm, world, id, rank, &config);
    ncclResult_t state = res;
    while (res == ncclInProgress || state == ncclInProgress)
      ncclCommGetAsyncError(s.comm, &state), res = ncclSuccess;
    if (res != ncclSuccess || state != ncclSuccess) {
      printf("rank %d: CommInitRankConfig failed: %s\n", rank, ncclGetLastError(NULL));
      return 1;
    }
    run_rank(&s);
    ncclCommDestroy(s.comm);
    return s.failures ? 1 : 0;
  }
  if (gpus() < 1) {
    printf("nccl_api_test: skipped: no GPU visible\n");
    return 0;
  }
  if (processes) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 1], ws[16], rs[16];
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i)
      sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
    snprintf(ws, sizeof ws, "%d", world);
    pid_t* kids = calloc(world, sizeof(pid_t));
    for (int r = 0; r < world; ++r) {
      snprintf(rs, sizeof rs, "%d", r);
      char* args[] = {argv[0], "--world", ws, "--rank", rs, "--id", hex, NULL};
      if (posix_spawn(&kids[r], argv[0], NULL, NULL, args, environ) != 0) return 1;
    }
    int bad = 0;
    for (int r = 0; r < world; ++r) {
      int st = 0;
      waitpid(kids[r], &st, 0);
      bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    printf("nccl_api_test, one process per rank, world %d: %s\n", world, bad ? "FAILED" : "passed");
    return bad ? 1 : 0;
  }
  /* ranks as threads: ncclCommInitAll, then a thread per rank */
  ncclComm_t* comms = calloc(world, sizeof(ncclComm_t));
  int* devs = calloc(world, sizeof(int));
  for (int r = 0; r < world; ++r) devs[r] = r % gpus();
  if (ncclCommInitAll(comms, world, devs) != ncclSuccess) {
    printf("CommInitAll failed: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  struct rank_state* st = calloc(world, sizeof *st);
  pthread_t* th = calloc(world, sizeof(pthread_t));
  for (int r = 0; r < world; ++r) {
    st[r] = (struct rank_state){.rank = r, .world = world, .device = devs[r], .comm = comms[r]};
    CUDA(cudaSetDevice(devs[r]));
    CUDA(cudaMalloc((void**)&st[r].arena, ARENA_BYTES));
    CUDA(cudaStreamCreateWithFlags(&st[r].stream, cudaStreamNonBlocking));
  }
  for (int r = 0; r < world; ++r) pthread_create(&th[r], NULL, run_rank, &st[r]);
  int bad = 0;
  for (int r = 0; r < world; ++r) pthread_join(th[r], NULL), bad += st[r].failures != 0;
  /* one thread drives every rank: a group of all-reduces, one per communicator */
  const int first_failures = st[0].failures;
  float** bufs = calloc(world, sizeof(float*));
  CHECK(&st[0], ncclGroupStart() == ncclSuccess, "GroupStart");
  for (int r = 0; r < world; ++r) {
    CUDA(cudaSetDevice(devs[r]));
    bufs[r] = dev_filled(&st[r], ncclFloat32, 777, r, 0);
    CHECK(&st[0],
          ncclAllReduce(bufs[r], bufs[r], 777, ncclFloat32, ncclSum, comms[r], st[r].stream) == ncclSuccess,
          "grouped AllReduce");
  }
  CHECK(&st[0], ncclGroupEnd() == ncclSuccess, "GroupEnd of one thread's all-reduces: %s",
        ncclGetLastError(NULL));
  /* every rank's result and async error, each failure printed */
  int grouped_failures = st[0].failures - first_failures;
  for (int r = 0; r < world; ++r) {
    char* h = host_copy(&st[r], bufs[r], 777 * 4);
    const double got = get(ncclFloat32, h, 100), want = reduced(ncclSum, ncclFloat32, world, 100);
    size_t wrong = 0;
    for (size_t i = 0; i < 777; ++i)
      wrong += get(ncclFloat32, h, i) != reduced(ncclSum, ncclFloat32, world, i);
    free(h);
    ncclResult_t async = ncclInternalError;
    const ncclResult_t asked = ncclCommGetAsyncError(comms[r], &async);
    if (got != want || asked != ncclSuccess || async != ncclSuccess) {
      /* late (the kernel ran outside the stream's order) or never written */
      CUDA(cudaDeviceSynchronize());
      h = host_copy(&st[r], bufs[r], 777 * 4);
      const double later = get(ncclFloat32, h, 100);
      free(h);
      printf(
          "one thread's group, rank %d: element 100 is %g, expected %g (%zu of 777 wrong; %g after a device "
          "synchronize); async error %d (%s)\n",
          r, got, want, wrong, later, async, async == ncclSuccess ? "none" : ncclGetLastError(comms[r]));
      ++grouped_failures;
    }
  }
  if (grouped_failures && st[0].failures > first_failures) printf("one thread's group: %s\n", st[0].first);
  bad += grouped_failures != 0;
  for (int r = 0; r < world; ++r) ncclCommDestroy(comms[r]);
  printf("nccl_api_test, ranks as threads, world %d: %s\n", world, bad ? "FAILED" : "passed");
  return bad ? 1 : 0;
}
