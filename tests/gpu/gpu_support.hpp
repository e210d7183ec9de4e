// tests/gpu/gpu_support.hpp: what the GPU test files share: the platform, the worlds this
// machine can form (one rank alone, and several ranks on every GPU, sharing GPUs when there are
// fewer than two), a configuration with small slots so that moderate sizes already take many
// pipeline steps on several blocks, and the decorators that skip a case this machine cannot run.
#pragma once

#include "../support/collective_check.hpp"

namespace ark_test {

using gpu = ark::platform::gpu;
using gpu_comm = ark::communicator<gpu>;

/// Ranks that share a GPU share its CUDA context, and under lazy module loading (CUDA's default) a
/// kernel's first launch waits for every kernel running in the context: a peer's among them, which
/// waits for this rank. So every kernel loads when the context starts (set before CUDA starts, in
/// static initialization; a value set by the user is kept).
/// And their streams share the context's hardware queues (8 by default), which run the steps of
/// the streams on one queue in the order they were enqueued: a rank's step that waits for its
/// stream's spinning wait (the copy-engine paths) holds up a peer's steps behind it, which that
/// wait may need. So every stream gets a queue of its own, up to 32 (docs/guide.md, "Ranks that share a
/// GPU"; docs/perf.md, runs br and bs). A value set by the user is kept.
/// Set once, on the first call: by gpu_count() before it asks CUDA anything (the cases' skip
/// decorators ask it while they register, in static initialization), and by gpu_environment_set.
inline bool set_gpu_environment() {
  static const bool set = ::setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0 &&
                          ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0;
  return set;
}
inline const bool gpu_environment_set = set_gpu_environment();

/// The GPUs CUDA sees, asked once (0 where there is no GPU or no driver).
inline int gpu_count() {
  static const int n = (set_gpu_environment(), gpu::device_count());
  return n;
}

/// The world of the tests that need several ranks: ARK_GPU_RANKS when set (at least 2), else every
/// GPU, and 2 on a machine with one GPU. Ranks beyond the GPU count share GPUs (rank_device), so a
/// one-GPU machine still runs the multi-rank protocol: over its own memory, not a link.
inline int gpu_ranks() {
  const int n = gpu_count();
  if (n < 1) return 0;
  if (const char* e = std::getenv("ARK_GPU_RANKS")) {
    const int want = std::atoi(e);
    if (want >= 2) return want;
  }
  return n >= 2 ? n : 2;
}

/// One rank alone, and the multi-rank world (under compute-sanitizer only the latter).
inline std::vector<int> gpu_worlds() {
  std::vector<int> w;
  if (gpu_count() < 1) return w;
  if (!std::getenv("ARK_SANITIZE")) w.push_back(1);
  w.push_back(gpu_ranks());
  return w;
}

inline gpu_comm::config gpu_small_config() {
  gpu_comm::config c;
  c.team.workers = 8;
  c.team.max_depth = 8;
  c.team.slot_bytes = 4096;
  c.team.ll_slot_bytes = 2048;
  c.team.staging = false;
  c.tuning.threads = 256;
  c.tuning.bytes_per_worker = 16 << 10;
  c.tuning.ll_bytes_per_worker = 2048;
  c.timeout = std::chrono::milliseconds(10000);
  // ARK_NO_EARLY_LAUNCH set: every call's kernel waits for the previous one in the plain way (to
  // tell, under compute-sanitizer, a tool that holds early launches from a protocol race)
  if (std::getenv("ARK_NO_EARLY_LAUNCH")) c.early_launch = false;
  return c;
}

/// Size classes: empty, one element, odd, LL range, several slots per block, many blocks.
/// Under compute-sanitizer (ARK_SANITIZE set) only the small ones, on all GPUs.
inline const std::vector<std::size_t>& gpu_sizes() {
  static const std::vector<std::size_t> full{0, 1, 1023, 65537, (1u << 20) + 3}, small{0, 1, 1023, 4099};
  return std::getenv("ARK_SANITIZE") ? small : full;
}

/// A case's skip decorator, decided when the case registers (before main): doctest 2.4 skips a case
/// only so, not from inside it. A case skipped so counts among "skipped" in doctest's summary,
/// the listener in tests/main.cpp prints why, and `-r=xml` shows the reason as its description.
///   TEST_CASE("gpu ...: ..." * needs_gpus(1))
///   TEST_CASE("gpu ...: ..." * skip_unless(condition(), "why it cannot run here"))
struct skip_unless {
  skip_unless(bool runs_here, const char* reason) : runs(runs_here), why(reason) {}
  bool runs;
  const char* why; // a string literal: doctest keeps the pointer
  void fill(doctest::detail::TestCase& tc) const {
    if (runs) return;
    tc.m_skip = true;
    tc.m_description = why;
  }
};
/// Skips the case on a machine with fewer than n GPUs (every GPU case needs one at least).
inline skip_unless needs_gpus(int n) {
  return {gpu_count() >= n, n == 1 ? "needs a GPU, none visible" : "needs more GPUs than are visible"};
}

/// What `enqueue()` puts on stream `s`, captured into a CUDA graph and instantiated; both are
/// destroyed with it. A capture that throws is ended first, so the stream is usable again.
class captured_graph {
public:
  template <class F>
  captured_graph(ark::detail::rt::stream_t s, F&& enqueue) : s_(s) {
    namespace rt = ark::detail::rt;
    rt::check(rt::begin_capture(s), "begin capture");
    try {
      enqueue();
    } catch (...) {
      rt::graph_t g{};
      if (rt::end_capture(s, &g) == rt::success && g) (void)rt::graph_destroy(g);
      throw;
    }
    rt::check(rt::end_capture(s, &graph_), "end capture");
    rt::check(rt::graph_instantiate(&exec_, graph_), "instantiate");
  }
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
  ~captured_graph() {
    (void)ark::detail::rt::graph_exec_destroy(exec_); // nothing to do about a failure here
    (void)ark::detail::rt::graph_destroy(graph_);
  }
  /// One replay on the stream it was captured on.
  void launch() const { ark::detail::rt::check(ark::detail::rt::graph_launch(exec_, s_), "launch graph"); }

private:
  ark::detail::rt::stream_t s_;
  ark::detail::rt::graph_t graph_{};
  ark::detail::rt::graph_exec_t exec_{};
};

/// `registered`: the buffers registered at the same place on every rank (zero-copy paths).
template <ark::collective K, class T, class Algos, class Backends, class Ops>
void gpu_matrix(Algos a, Backends b, Ops o, bool registered = false) {
  run_matrix<K, T, gpu>(a, b, o, gpu_small_config(), gpu_worlds(), gpu_sizes(), registered);
}

} // namespace ark_test
