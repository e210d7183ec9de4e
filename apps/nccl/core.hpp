// apps/nccl/core.hpp: NCCL's API over ark's public API, written once over the platform concept.
// apps/nccl/nccl.cu instantiates it on CUDA and exports NCCL's C functions from it (a
// libnccl.so.2 that programs load in place of NCCL's); tests/nccl/ instantiates it on the host
// platform, where each rank is a thread, and checks its logic without a GPU. Below it, a header
// each: NCCL's values (values.hpp), errors and settings (errors.hpp), unique ids (ids.hpp), the
// communicator (comm.hpp) and groups (groups.hpp); here, the API's calls.
//
// What it keeps of NCCL's semantics, and how:
// - The unique id names a rendezvous (a Unix socket path, so one machine's processes and threads):
//   rank 0 listens there, the others connect. The communicator takes one bootstrap; the shim keeps
//   a second one of its own (splits, the real NCCL's id for forwarded calls).
// - A group (ncclGroupStart/End) defers what it holds to its end: inits (run at once, a thread
//   each when several, since each waits for its peers), then each communicator's operations, a
//   bucket per (communicator, stream) in one ark group: its sends and receives in one launch
//   that cannot deadlock on their order, its collectives in call order, like ones batched into
//   one launch (communicator::group_start). Where launches run the work
//   before returning (the host platform), buckets run a thread each, as ranks do.
// - Every call returns at once with its work enqueued on the caller's stream; errors are NCCL's
//   codes with a text that ncclGetLastError gives (this thread's last).
// - Destroy and abort hand the ark communicator to a thread that tears it down: ark's teardown
//   waits (bounded) for every rank, and one thread may destroy every rank's communicator in turn.
#pragma once

#include "nccl/groups.hpp"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ark::nccl {

// -- the API -------------------------------------------------------------------------------------
/// Initializes c now, or at the end of the open group (NCCL's way to set up several GPUs from one
/// thread: each rank inits at the end, together); hands it to *out either way.
template <device P>
void start(std::unique_ptr<comm<P>> c, comm<P>** out) {
  auto& g = group<P>::mine();
  if (g.depth > 0)
    g.inits.push_back([raw = c.get()] { raw->init(); });
  else
    c->init();
  *out = c.release();
}

template <device P>
result init_rank(comm<P>** out, int world, const unique_id& id, int rank, const comm_config& cfg,
                 const char* call = "ncclCommInitRank") {
  return guard(call, [&] {
    if (!out) fail(result::invalid_argument, call, "comm is NULL");
    *out = nullptr;
    start(std::make_unique<comm<P>>(id, world, rank, cfg, current_device<P>(), call), out);
  });
}

/// Every rank of a new id in this process, one per device (ncclCommInitAll).
template <device P>
result init_all(comm<P>** comms, int n, const int* devices) {
  const char* call = "ncclCommInitAll";
  return guard(call, [&] {
    if (!comms) fail(result::invalid_argument, call, "comms is NULL");
    if (n < 1) fail(result::invalid_argument, call, "ndev must be at least 1");
    const unique_id id = make_id();
    std::vector<std::unique_ptr<comm<P>>> made;
    std::vector<std::function<void()>> jobs;
    for (int r = 0; r < n; ++r) {
      const int d = devices ? devices[r] : r;
      made.push_back(std::make_unique<comm<P>>(id, n, r, comm_config{}, d, call));
      jobs.push_back([c = made.back().get()] { c->init(); });
    }
    run_together(jobs);
    for (int r = 0; r < n; ++r) comms[r] = made[r].release();
  });
}

/// ncclCommSplit: ranks of one color form a communicator, ordered by key then rank.
template <device P>
result split(comm<P>* parent, int color, int key, comm<P>** out, const comm_config& cfg,
             const char* call = "ncclCommSplit") {
  return guard(call, [&] {
    if (!parent) fail(result::invalid_argument, call, "comm is NULL");
    if (!out) fail(result::invalid_argument, call, "newcomm is NULL");
    if (color < split_nocolor)
      fail(result::invalid_argument, call,
           "color " + std::to_string(color) + " is negative (NCCL_SPLIT_NOCOLOR is -1)");
    *out = nullptr;
    parent->ark(call);
    struct entry {
      int color, key, rank;
    };
    std::vector<entry> all(parent->world());
    const entry mine{color, key, parent->rank()};
    parent->side().all_gather(&mine, all.data(), sizeof mine);
    const std::uint64_t n = parent->next_split();
    if (color == split_nocolor) return;
    std::vector<entry> members;
    for (const auto& e : all)
      if (e.color == color) members.push_back(e);
    std::stable_sort(members.begin(), members.end(), [](const entry& a, const entry& b) {
      return a.key != b.key ? a.key < b.key : a.rank < b.rank;
    });
    int new_rank = 0;
    while (members[new_rank].rank != parent->rank()) ++new_rank;
    start(std::make_unique<comm<P>>(derived_id(parent->path(), n, color), static_cast<int>(members.size()),
                                    new_rank, cfg, parent->device(), call),
          out);
  });
}

/// ncclCommShrink: the ranks not excluded, in their order.
template <device P>
result shrink(comm<P>* parent, const int* exclude, int n_exclude, comm<P>** out, const comm_config& cfg) {
  const char* call = "ncclCommShrink";
  if (n_exclude > 0 && !exclude) {
    last_error_text() = std::string(call) + ": excludeRanksList is NULL";
    return result::invalid_argument;
  }
  bool excluded = false;
  for (int i = 0; i < n_exclude && parent; ++i) excluded = excluded || exclude[i] == parent->rank();
  return split(parent, excluded ? split_nocolor : 0, parent ? parent->rank() : 0, out, cfg, call);
}

template <device P>
result destroy(comm<P>* c, bool abort) {
  if (!c) return result::success; // NCCL accepts a null communicator here
  c->finish(abort);
  delete c;
  return result::success;
}

/// ncclGetLastError(comm): this thread's last failure; when there is none, the asynchronous error
/// comm recorded (which rank and step waited for what), so a failed ncclCommGetAsyncError has a
/// reason to print.
template <device P>
const char* last_error(comm<P>* c) {
  const std::string& text = last_error_text();
  if (text.empty() && c && c->ready()) {
    const error_record e = c->ark("ncclGetLastError").last_error();
    thread_local std::string recorded;
    if (static_cast<errc>(e.code) != errc::ok) return (recorded = ark::describe(e, c->rank())).c_str();
  }
  return text.c_str();
}

template <device P>
result async_error(comm<P>* c, result* out) {
  return guard("ncclCommGetAsyncError", [&] {
    if (!c || !out) fail(result::invalid_argument, "ncclCommGetAsyncError", "comm or asyncError is NULL");
    *out = c->ready() ? async_result(c->ark("ncclCommGetAsyncError").last_error()) : result::success;
  });
}

template <device P>
result create_premul_sum(int* op, const void* scalar, data_type t, scalar_residence where, comm<P>* c) {
  const char* call = "ncclRedOpCreatePreMulSum";
  return guard(call, [&] {
    if (!op || !scalar || !c) fail(result::invalid_argument, call, "op, scalar or comm is NULL");
    check_type(t, call);
    const auto as = reduced_as(t, op::dynamic::kind::premul_sum);
    if (!as) fail(result::invalid_argument, call, std::string("ark does not scale ") + name_of(t));
    op::dynamic d{op::dynamic::kind::premul_sum};
    if (where == scalar_residence::device) {
      d.scale_at = scalar;
      d.scale_type = *as;
    } else {
      d.scale = ark::with_dtype(*as, [&](auto v) {
        using T = decltype(v);
        T x;
        std::memcpy(&x, scalar, sizeof x);
        return static_cast<double>(static_cast<acc_t<T>>(x));
      });
    }
    *op = c->add_op(d, t);
  });
}

/// A reduction's type and op resolved once: ark's op, and the ark type it runs in where ark
/// serves it (else the call is forwarded to NCCL where that is allowed and possible, or fails).
struct reduction_plan {
  op::dynamic op;
  std::optional<ark::dtype> as;
  data_type type{}; ///< the call's own type and op, for the log
  int nccl_op = 0;
};

/// Resolves the op and type of a reduction on c; throws failure for what no library serves (a
/// NULL comm, a type or op that is not NCCL's or not c's).
template <device P>
reduction_plan plan_reduction(comm<P>* c, data_type t, int op, const char* call) {
  if (!c) fail(result::invalid_argument, call, "comm is NULL");
  check_type(t, call);
  reduction_plan p{c->op_of(op, t, call), {}, t, op};
  p.as = reduced_as(t, p.op.k);
  return p;
}

/// A reduction ark serves (p.as is set), run now or at the group's end.
template <device P, class F>
result reduction(const char* call, comm<P>* c, const reduction_plan& p, typename P::stream s, F f) {
  assert(p.as.has_value());
  if (c->logs_calls())
    log(2, [&] {
      return std::string(call) + " " + name_of(p.type) + " op " + std::to_string(p.nccl_op) + ": ark";
    });
  return submit<P>(call, c, s, [=, d = p.op, as = *p.as](ark::communicator<P>& a) {
    ark::with_dtype(as, [&](auto e) { f(e, d, a, c->options(s)); });
  });
}

/// A reduction resolved now (errors returned by the call, as NCCL does), run now or at the
/// group's end; one that ark does not serve fails (forward.hpp forwards it first where it may).
template <device P, class F>
result reduction(const char* call, comm<P>* c, data_type t, int op, typename P::stream s, F f) {
  reduction_plan p;
  const result r = guard(call, [&] {
    p = plan_reduction(c, t, op, call);
    if (!p.as)
      fail(result::invalid_argument, call,
           std::string("ark does not reduce ") + name_of(t) +
               " with this op, and the call could not be forwarded to NCCL");
  });
  if (r != result::success) return r;
  return reduction(call, c, p, s, f);
}

/// A call that moves bytes: any type, as bytes (every rank passes the same type, so the same
/// byte counts).
template <device P, class F>
result movement(const char* call, comm<P>* c, data_type t, typename P::stream s, F f) {
  const result r = guard(call, [&] { check_type(t, call); });
  if (r != result::success) return r;
  if (c && c->logs_calls()) log(2, [&] { return std::string(call) + " " + name_of(t) + ": ark"; });
  return submit<P>(call, c, s, [=](ark::communicator<P>& a) { f(a, c->options(s), size_of(t)); });
}

// collectives: reductions run in the data's ark type with a run-time op; the others move bytes
// The reductions' work on ark's communicator, in the call's ark type (e) with its op (d).
template <device P>
auto all_reduce_work(const void* in, void* out, std::size_t count) {
  return [=](auto e, op::dynamic d, ark::communicator<P>& a, const call_options<P>& o) {
    using T = decltype(e);
    a.all_reduce(static_cast<const T*>(in), static_cast<T*>(out), count, d, o);
  };
}
template <device P>
auto reduce_scatter_work(const void* in, void* out, std::size_t count) {
  return [=](auto e, op::dynamic d, ark::communicator<P>& a, const call_options<P>& o) {
    using T = decltype(e);
    a.reduce_scatter(static_cast<const T*>(in), static_cast<T*>(out), count, d, o);
  };
}
template <device P>
auto reduce_work(const void* in, void* out, std::size_t count, int root) {
  return [=](auto e, op::dynamic d, ark::communicator<P>& a, const call_options<P>& o) {
    using T = decltype(e);
    a.reduce(static_cast<const T*>(in), static_cast<T*>(out), count, root, d, o);
  };
}

template <device P>
result all_reduce(const void* in, void* out, std::size_t count, data_type t, int op, comm<P>* c,
                  typename P::stream s) {
  return reduction("ncclAllReduce", c, t, op, s, all_reduce_work<P>(in, out, count));
}
template <device P>
result reduce_scatter(const void* in, void* out, std::size_t count, data_type t, int op, comm<P>* c,
                      typename P::stream s) {
  return reduction("ncclReduceScatter", c, t, op, s, reduce_scatter_work<P>(in, out, count));
}
template <device P>
result reduce(const void* in, void* out, std::size_t count, data_type t, int op, int root, comm<P>* c,
              typename P::stream s) {
  return reduction("ncclReduce", c, t, op, s, reduce_work<P>(in, out, count, root));
}

template <device P>
result all_gather(const void* in, void* out, std::size_t count, data_type t, comm<P>* c,
                  typename P::stream s) {
  return movement(
      "ncclAllGather", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.all_gather(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, o);
      });
}
template <device P>
result broadcast(const void* in, void* out, std::size_t count, data_type t, int root, comm<P>* c,
                 typename P::stream s, const char* call = "ncclBroadcast") {
  return movement(call, c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
    a.broadcast(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, root, o);
  });
}
template <device P>
result all_to_all(const void* in, void* out, std::size_t count, data_type t, comm<P>* c,
                  typename P::stream s) {
  return movement(
      "ncclAlltoAll", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.all_to_all(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, o);
      });
}
template <device P>
result gather(const void* in, void* out, std::size_t count, data_type t, int root, comm<P>* c,
              typename P::stream s) {
  return movement(
      "ncclGather", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.gather(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, root, o);
      });
}
template <device P>
result scatter(const void* in, void* out, std::size_t count, data_type t, int root, comm<P>* c,
               typename P::stream s) {
  return movement(
      "ncclScatter", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
        a.scatter(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), count * b, root, o);
      });
}
template <device P>
result send(const void* buf, std::size_t count, data_type t, int peer, comm<P>* c, typename P::stream s) {
  return movement("ncclSend", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
    a.send(static_cast<const std::uint8_t*>(buf), count * b, peer, o);
  });
}
template <device P>
result recv(void* buf, std::size_t count, data_type t, int peer, comm<P>* c, typename P::stream s) {
  return movement("ncclRecv", c, t, s, [=](ark::communicator<P>& a, const call_options<P>& o, std::size_t b) {
    a.recv(static_cast<std::uint8_t*>(buf), count * b, peer, o);
  });
}

// -- memory --------------------------------------------------------------------------------------
template <device P>
result mem_alloc(void** p, std::size_t bytes) {
  return guard("ncclMemAlloc", [&] {
    if (!p) fail(result::invalid_argument, "ncclMemAlloc", "ptr is NULL");
    *p = allocations<P>::get().allocate(bytes);
  });
}
template <device P>
result mem_free(void* p) {
  return guard("ncclMemFree", [&] {
    if (p && !allocations<P>::get().release(p))
      fail(result::invalid_argument, "ncclMemFree", "the pointer was not allocated by ncclMemAlloc");
  });
}

/// ncclCommWindowRegister (collective): ark's register_buffer; the window is the registered base.
template <device P>
result window_register(comm<P>* c, void* p, std::size_t bytes, void** window) {
  const char* call = "ncclCommWindowRegister";
  return guard(call, [&] {
    if (!c || !window) fail(result::invalid_argument, call, "comm or win is NULL");
    c->ark(call).register_buffer(p, bytes);
    *window = p;
  });
}
template <device P>
result window_deregister(comm<P>* c, void* window) {
  const char* call = "ncclCommWindowDeregister";
  return guard(call, [&] {
    if (!c) fail(result::invalid_argument, call, "comm is NULL");
    c->ark(call).deregister_buffer(window);
  });
}

} // namespace ark::nccl
