// bench/cuda_api_tally.cpp: where a host thread's time goes between kernel launches, for the
// eager costs that no GPU timer shows (the NCCL API's shim against ark's own API, say). A CUPTI
// injection library: load it with CUDA_INJECTION64_PATH=.../libcuda_api_tally.so and run any CUDA
// program. On each thread it cuts the stream of CUDA runtime calls at every kernel or graph launch;
// a segment is the calls since the previous launch, ending with this one. Segments are tallied by
// the binary that launched (the object holding the kernel's host stub where the launch names one,
// else the first caller on the stack outside CUDA: libnccl.so.2 apart from the program) and by the
// names of their calls, in order. Runtime calls only: a driver-API launch (the real NCCL's) is not
// seen. At exit it prints, for every segment seen at least ARK_TALLY_MIN times (default 100): the
// count, the mean time inside CUDA calls and the mean time outside them (the caller's own work:
// ark's host path, the shim's), in ns. CUPTI's callbacks add their own cost to both sides alike;
// compare segments of one run.
//   export CUDA_INJECTION64_PATH=$PWD/build/bench/libcuda_api_tally.so
//   LD_PRELOAD=build/apps/nccl/libnccl.so.2 build/bench/ark_bench_shared --ranks 2 --min 8 --max 8
#include <cupti.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct tally {
  std::uint64_t count = 0;
  std::int64_t inside_ns = 0, outside_ns = 0;
};

struct book {
  std::mutex m;
  std::map<std::string, tally> segments; // "binary | call, call, ..."
  static book& get() {
    static book* b = new book; // never destroyed: threads may report after static destructors
    return *b;
  }
};

/// One thread's segment in progress.
struct thread_state {
  std::string calls;          // the names so far; a call repeated at once is written once, with a '*'
  const char* last = nullptr; // the last name written
  std::int64_t inside = 0, outside = 0;
  std::int64_t entered = 0, left = 0; // the last top-level call's enter and exit (0: none yet)
  int depth = 0;                      // runtime calls nest (cudaGraphLaunch inside a launch...)
};
/// Never destroyed: CUDA calls at exit (a module's unregistration, a singleton's frees) come after
/// the thread's own destructors ran.
thread_local thread_state* mine = new thread_state;

/// A segment's names stay readable whatever a thread does between launches (polls, say).
constexpr std::size_t most_chars = 2000;

/// The file of the object at address a (the program or a shared library), its base name.
std::string binary_of(const void* a) {
  Dl_info info{};
  if (!a || !dladdr(a, &info) || !info.dli_fname) return "?";
  const std::string f = info.dli_fname;
  return f.substr(f.rfind('/') + 1);
}

/// The launched kernel's host stub, where the call's parameters name one.
const void* launched(CUpti_CallbackId id, const CUpti_CallbackData* d) {
  switch (id) {
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    return static_cast<const cudaLaunchKernel_v7000_params*>(d->functionParams)->func;
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
    return static_cast<const cudaLaunchKernelExC_v11060_params*>(d->functionParams)->func;
  default:
    return nullptr;
  }
}

/// The binary that made the current call, from the stack: the first frame outside CUPTI, this
/// library and CUDA's shared runtime and driver (a program on the static runtime holds it: that
/// frame is the program's). For launches that name no stub (CUDA 13's <<<>>> passes a kernel
/// handle) and graph launches.
std::string caller() {
  void* frames[32];
  const int n = backtrace(frames, 32);
  for (int i = 1; i < n; ++i) {
    const std::string b = binary_of(frames[i]);
    if (b.rfind("libcupti", 0) != 0 && b.rfind("libcuda", 0) != 0) return b; // libcuda*: this one too
  }
  return "?";
}

bool is_launch(CUpti_CallbackId id) {
  switch (id) {
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
  case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
  case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
    return true;
  default:
    return false;
  }
}

void note(thread_state& t, const char* name) {
  if (t.last && std::strcmp(t.last, name) == 0) { // the same call again: one name, marked
    if (t.calls.empty() || t.calls.back() != '*') t.calls += '*';
    return;
  }
  t.last = name;
  if (t.calls.size() > most_chars) {
    if (t.calls.compare(t.calls.size() - 3, 3, "...") != 0) t.calls += ", ...";
    return;
  }
  if (!t.calls.empty()) t.calls += ", ";
  t.calls += name;
}

void CUPTIAPI on_call(void*, CUpti_CallbackDomain, CUpti_CallbackId id, const void* data) {
  const auto* d = static_cast<const CUpti_CallbackData*>(data);
  thread_state& t = *mine;
  if (d->callbackSite == CUPTI_API_ENTER) {
    if (t.depth++ > 0) return;
    const std::int64_t at = now_ns();
    if (t.left) t.outside += at - t.left;
    t.entered = at;
    note(t, d->functionName);
    return;
  }
  if (t.depth == 0) return; // an exit whose enter came before the subscription
  if (--t.depth > 0) return;
  const std::int64_t at = now_ns();
  t.inside += at - t.entered;
  t.left = at;
  if (!is_launch(id)) return;
  const void* stub = launched(id, d);
  const std::string key = (stub ? binary_of(stub) : caller()) + " | " + t.calls;
  {
    book& b = book::get();
    std::lock_guard<std::mutex> lock(b.m);
    tally& s = b.segments[key];
    ++s.count, s.inside_ns += t.inside, s.outside_ns += t.outside;
  }
  t.calls.clear(), t.last = nullptr, t.inside = 0, t.outside = 0;
  t.left = now_ns(); // the bookkeeping above is not the caller's
}

void report() {
  book& b = book::get();
  std::lock_guard<std::mutex> lock(b.m);
  const char* m = std::getenv("ARK_TALLY_MIN");
  const std::uint64_t least = m ? std::strtoull(m, nullptr, 10) : 100;
  std::vector<std::pair<std::string, tally>> rows(b.segments.begin(), b.segments.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.second.count > y.second.count; });
  std::fprintf(stderr, "cuda_api_tally: %10s %10s %10s  binary | calls since the previous launch\n",
               "segments", "inside ns", "outside ns");
  for (const auto& [key, s] : rows)
    if (s.count >= least)
      std::fprintf(stderr, "cuda_api_tally: %10llu %10.0f %10.0f  %s\n",
                   static_cast<unsigned long long>(s.count), static_cast<double>(s.inside_ns) / s.count,
                   static_cast<double>(s.outside_ns) / s.count, key.c_str());
}

} // namespace

/// CUDA calls this once, at the process's first CUDA call (CUDA_INJECTION64_PATH).
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  CUpti_SubscriberHandle subscriber{};
  if (cuptiSubscribe(&subscriber, on_call, nullptr) != CUPTI_SUCCESS ||
      cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cuda_api_tally: CUPTI refused the subscription\n");
    return 0;
  }
  std::atexit(report);
  return 1;
}
