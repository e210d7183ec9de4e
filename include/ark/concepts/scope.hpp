// ark/concepts/scope.hpp: who cooperates on a piece of work.
//
// Algorithms never read threadIdx or a thread id from a global: they receive a scope object.
// A type G is a scope when, for an lvalue g:
//   1. g.thread_rank() returns this thread's index in [0, g.size()), as unsigned;
//   2. g.size() returns the number of threads in the scope, the same in every thread;
//   3. g.sync() is a barrier of all threads of the scope with acquire/release semantics among them;
//   4. g.sync_any(p) is such a barrier that also returns, in every thread, whether p was true in
//      at least one thread.
// Every thread of the scope calls the same scope-collective functions in the same order.
// Models: host_team (ark/platform/host_team.hpp, threads of a host rank), block_scope
// (ark/platform/gpu_scope.hpp, a CUDA/HIP thread block): each platform's launch makes its own.
#pragma once

#include "ark/config.hpp"

#include <concepts>

namespace ark {

template <class G>
concept scope = requires(G& g, bool p) {
  { g.thread_rank() } -> std::same_as<unsigned>;
  { g.size() } -> std::same_as<unsigned>;
  { g.sync() } -> std::same_as<void>;
  { g.sync_any(p) } -> std::same_as<bool>;
};

/// A scope of one thread: the simplest model, used by the host backend and by tests.
struct single_thread_scope {
  ARK_HD unsigned thread_rank() const { return 0; }
  ARK_HD unsigned size() const { return 1; }
  ARK_HD void sync() {}
  ARK_HD bool sync_any(bool p) { return p; }
};

static_assert(scope<single_thread_scope>);

} // namespace ark
