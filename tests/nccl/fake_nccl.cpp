// tests/nccl/fake_nccl.cpp: a stand-in for the real NCCL, loaded by the host tests of
// apps/nccl/forward.hpp. It has the entry points forward.hpp opens, by NCCL's ABI; its reductions
// write each input byte's complement (so that a test tells its work from ark's) and keep what each
// rank asked, which the test reads through fake_nccl_asked.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {
struct unique_id {
  char internal[128];
};
struct fake_comm {
  int world;
  int rank;
  unique_id id;
};
/// What rank r's twin was last asked (ranks of one test only: at most 8).
struct asked {
  int calls;
  int world;
  int type;
  int op;
  int root;
  std::size_t count;
  unique_id id;
};
asked record[8];
int made_ids = 0;
constexpr std::size_t type_bytes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

int reduction(const void* in, void* out, std::size_t count, int type, int op, int root, void* comm) {
  auto* c = static_cast<fake_comm*>(comm);
  if (!c || type < 0 || type > 11 || c->rank >= 8) return 4; // ncclInvalidArgument
  asked& a = record[c->rank];
  a = {a.calls + 1, c->world, type, op, root, count, c->id};
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < count * type_bytes[type]; ++i) dst[i] = static_cast<unsigned char>(~src[i]);
  return 0;
}
} // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT int ncclGetVersion(int* v) {
  *v = 22809;
  return 0;
}
FAKE_EXPORT const char* ncclGetErrorString(int) { return "fake NCCL error"; }
FAKE_EXPORT int ncclGetUniqueId(unique_id* id) {
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, "fake", 4);
  id->internal[4] = static_cast<char>(++made_ids);
  return 0;
}
FAKE_EXPORT int ncclCommInitRank(void** comm, int world, unique_id id, int rank) {
  *comm = new fake_comm{world, rank, id};
  return 0;
}
FAKE_EXPORT int ncclCommDestroy(void* comm) {
  delete static_cast<fake_comm*>(comm);
  return 0;
}
FAKE_EXPORT int ncclCommAbort(void* comm) { return ncclCommDestroy(comm); }
FAKE_EXPORT int ncclAllReduce(const void* in, void* out, std::size_t count, int type, int op, void* comm,
                              void*) {
  return reduction(in, out, count, type, op, -1, comm);
}
FAKE_EXPORT int ncclReduceScatter(const void* in, void* out, std::size_t count, int type, int op, void* comm,
                                  void*) {
  return reduction(in, out, count, type, op, -1, comm);
}
FAKE_EXPORT int ncclReduce(const void* in, void* out, std::size_t count, int type, int op, int root,
                           void* comm, void*) {
  return reduction(in, out, count, type, op, root, comm);
}
/// The test's view: what rank r's twin was last asked, and how many calls it had.
FAKE_EXPORT const asked* fake_nccl_asked(int rank) { return rank >= 0 && rank < 8 ? &record[rank] : nullptr; }
