// apps/nccl/groups.hpp: ncclGroupStart/End: what a thread's group holds until its end, and
// submit(), which runs an operation now or there.
#pragma once

#include "nccl/comm.hpp"

#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ark::nccl {

/// What a group holds until its end (this thread's).
template <device P>
struct group {
  struct work {
    comm<P>* c;
    typename P::stream s;
    std::string call;
    std::function<void(ark::communicator<P>&)> run;
  };
  int depth = 0;
  std::vector<std::function<void()>> inits;
  std::vector<work> ops;
  static group& mine() {
    thread_local group g;
    return g;
  }
};

/// Runs jobs at once, a thread each when there are several (each may wait for the others'
/// peers); throws the first failure after every job ended.
inline void run_together(std::vector<std::function<void()>>& jobs) {
  std::vector<std::exception_ptr> errors(jobs.size());
  auto one = [&](std::size_t i) {
    try {
      jobs[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (jobs.size() == 1) {
    one(0);
  } else {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < jobs.size(); ++i) threads.emplace_back(one, i);
    for (auto& t : threads) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

/// Issues a bucket: one communicator's operations on one stream, in one ark group (its
/// collectives batched, its sends and receives in one launch).
template <device P>
void issue(std::vector<typename group<P>::work*>& bucket) {
  auto& a = bucket.front()->c->ark(bucket.front()->call.c_str());
  if (bucket.size() == 1) return bucket.front()->run(a);
  a.group_start();
  try {
    for (auto* w : bucket) w->run(a);
  } catch (...) {
    try {
      a.group_end();
    } catch (...) {
    }
    throw;
  }
  a.group_end();
}

template <device P>
result group_start() {
  ++group<P>::mine().depth;
  return result::success;
}

/// Ends this thread's group: its inits, then its operations (see the top of this file).
template <device P>
result group_end(const char* call = "ncclGroupEnd") {
  auto& g = group<P>::mine();
  if (g.depth == 0) {
    last_error_text() = std::string(call) + ": no ncclGroupStart is open";
    return result::invalid_usage;
  }
  if (--g.depth > 0) return result::success;
  auto inits = std::exchange(g.inits, {});
  auto ops = std::exchange(g.ops, {});
  return guard(call, [&] {
    if (!inits.empty()) run_together(inits);
    launch_gate::inside launching; // every rank's launch of the group before any teardown frees
    std::vector<std::vector<typename group<P>::work*>> buckets;
    for (auto& w : ops) {
      auto it = std::find_if(buckets.begin(), buckets.end(),
                             [&](const auto& b) { return b.front()->c == w.c && b.front()->s == w.s; });
      if (it == buckets.end())
        buckets.push_back({&w});
      else
        it->push_back(&w);
    }
    bool together = P::synchronous_launch && buckets.size() > 1;
    if (together) {
      std::vector<std::function<void()>> jobs;
      for (auto& b : buckets)
        jobs.push_back([&b, d = b.front()->c->device()] {
          use_device<P>(d);
          issue<P>(b);
        });
      run_together(jobs);
    } else {
      for (auto& b : buckets) issue<P>(b);
    }
  });
}

/// Drops this thread's group without running it (ncclGroupSimulateEnd).
template <device P>
result group_drop() {
  auto& g = group<P>::mine();
  if (g.depth == 0) {
    last_error_text() = "ncclGroupSimulateEnd: no ncclGroupStart is open";
    return result::invalid_usage;
  }
  if (--g.depth == 0) g.inits.clear(), g.ops.clear();
  return result::success;
}

/// Runs an operation now, or at the end of the open group.
template <device P, class F>
result submit(const char* call, comm<P>* c, typename P::stream s, F&& run) {
  auto& g = group<P>::mine();
  return guard(call, [&] {
    if (!c) fail(result::invalid_argument, call, "comm is NULL");
    if (g.depth > 0) {
      g.ops.push_back({c, s, call, std::forward<F>(run)});
      return;
    }
    launch_gate::inside launching;
    run(c->ark(call));
  });
}

} // namespace ark::nccl
