// ark/communicator/communicator.hpp: the host-side facade, one object per rank, like an NCCL
// communicator. Each call checks its arguments (communicator/checks.hpp), plans
// (communicator/planner.hpp), joins the previous call and launches (communicator/runtime.hpp,
// engines.hpp) or runs the copy-engine protocol (ce_protocol.hpp); recorded failures become
// exceptions (errors.hpp). Registered buffers: registry.hpp.
//
//   auto group = std::make_shared<ark::in_process_group>(world);      // host: ranks are threads
//   ark::communicator<ark::platform::host> comm(ark::in_process_bootstrap(group, rank));
//   comm.all_reduce(in, out, count);                                  // in every rank's thread
#pragma once

#include "ark/collectives/fused.hpp"
#include "ark/collectives/works.hpp"
#include "ark/communicator/ce_protocol.hpp"
#include "ark/communicator/engines.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ark {

template <device P>
class communicator {
public:
  using config = communicator_config<P>;

  /// Bytes of symmetric memory a rank needs for `world` ranks and this team configuration.
  static std::size_t required_scratch(int world, const team_config& t) { return make_layout(world, t).total; }

  /// Collective: every rank constructs its communicator with the same configuration.
  template <bootstrap Boot>
  explicit communicator(Boot boot, config cfg = {}) : rt_(std::move(boot), std::move(cfg)) {
    try { // no peer can write into our region yet: a peer's communicator exists only once every
          // rank passed the closing barrier
      ce_.start(rt_);
      engines_.start(rt_);
    } catch (...) {
      release(true);
      throw;
    }
    try {
      rt_.boot().barrier();
    } catch (...) { // peers past the barrier may write into our region: it is kept (leaked)
      release(false);
      throw;
    }
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  /// Collective: close(), then frees what the communicator made.
  ~communicator() { release(close()); }

  /// Collective, the first half of the destructor: ends what still runs on the communicator's
  /// streams and waits (bounded) for every rank to arrive, so that no peer writes into our memory
  /// any more. Returns whether every rank arrived in time; if one did not, the destructor leaks
  /// the memory peers write into rather than free it under a late writer. After close() the
  /// destructor is local: it only frees. A caller that makes several ranks' communicators in one
  /// process may hold its launches off those frees (CUDA's free waits for the whole GPU, so a
  /// free between two ranks' launches of one collective would wait for a kernel that waits for
  /// the launch the free holds up). Calls after close() are refused; a second close() returns the
  /// first's answer.
  bool close() noexcept {
    if (rt_.closed()) return quiet_;
    rt_.mark_closed();
    try {
      auto* c = rt_.control_host();
      // what still runs on our streams ends first, sooner while an abort is still raised
      engines_.quiesce();
      drain();
      clear_error(*c);
      P::zero(rt_.lay().claim(rt_.team().local()), sizeof(std::uint32_t));
      P::launch(rt_.own_stream(), launch_shape{1, 1}, detail::barrier_work<P>{rt_.device_handle()});
      P::synchronize(rt_.own_stream());
      quiet_ = read_error(*c).code == 0;
    } catch (...) {
    }
    return quiet_;
  }

  int rank() const { return rt_.rank(); }
  int world() const { return rt_.world(); }
  /// Bytes of symmetric scratch this rank uses (its region).
  std::size_t scratch_bytes() const { return rt_.lay().total; }
  const team_view& team() const { return rt_.team(); }
  /// What the communicator holds: its scratch, the engine's queues and graphs, the control block,
  /// the buffers registered, its streams (docs/guide.md, "Memory").
  memory_report memory() const {
    memory_report r;
    rt_.report(r);
    engines_.report(rt_.lay(), r);
    r.windows = reg_.size();
    r.streams += ce_.streams();
    return r;
  }
  const config& configuration() const { return rt_.cfg(); }
  /// The most thread blocks one call uses, 0 for no limit beyond the call's own choice. Set when
  /// ranks share a GPU (docs/guide.md, "Ranks that share a GPU"): every block of every rank's call must
  /// be able to be resident at once, so the ranks on a GPU split its SMs, two calls a rank with
  /// early launch (team/residency.hpp). Automatic choices stay under it; a call or launch that
  /// asks for more workers is refused. Your own kernels that call the device-side API keep to it
  /// too (their grids are yours).
  unsigned block_cap() const { return rt_.block_cap(); }
  typename P::stream stream() const { return rt_.own_stream(); }
  /// How many launches this rank's calls made so far: kernels (a group's batch is one), and
  /// copy-engine calls one each.
  std::uint64_t launches() const { return rt_.launches(); }
  device_comm<P> device_handle() const { return rt_.device_handle(); }

  // -- collectives --------------------------------------------------------------------------------
  /// out[i] = in[i] reduced over all ranks. In place when in == out.
  template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
  void all_reduce(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    detail::check_collective<collective::all_reduce>("all_reduce", in, out, count, 0, rank(), world());
    if constexpr (std::is_same_v<B, dma::copy_engine>)
      ce_now().all_reduce(rt_, reg_, "all_reduce", in, out, count, op, o);
    else
      run<collective::all_reduce, A, B>("all_reduce", in, out, count, 0, op, o);
  }

  /// in: world blocks of `count`; out (count elements) = block `rank` reduced over all ranks.
  /// In place when out == in + rank * count.
  template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
  void reduce_scatter(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather, broadcast, all_to_all, gather and "
                  "scatter");
    detail::check_collective<collective::reduce_scatter>("reduce_scatter", in, out, count, 0, rank(),
                                                         world());
    run<collective::reduce_scatter, A, B>("reduce_scatter", in, out, count, 0, op, o);
  }

  /// out (world blocks of `count`): block r = rank r's in. In place when in == out + rank * count.
  template <class A = algo::automatic, class B = dma::automatic, element T>
  void all_gather(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    detail::check_collective<collective::all_gather>("all_gather", in, out, count, 0, rank(), world());
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_now().template gather<collective::all_gather>(
          rt_, reg_, "all_gather", in, out, count, count * world(), 0, in != out + rank() * count, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::all_gather, A, B>("all_gather", in, out, count, 0, op::sum{}, o);
  }

  /// out = root's in on every rank (root's out too, unless in == out).
  template <class B = dma::automatic, element T>
  void broadcast(const T* in, T* out, std::size_t count, int root, const call_options<P>& o = {}) {
    detail::check_collective<collective::broadcast>("broadcast", in, out, count, root, rank(), world());
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_now().template gather<collective::broadcast>(rt_, reg_, "broadcast", in, out, count, count,
                                                             root, rank() == root && in != out, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::broadcast, algo::direct, B>("broadcast", in, out, count, root, op::sum{}, o);
  }

  /// root's out = in reduced over all ranks.
  template <class B = dma::automatic, element T, class Op = op::sum>
  void reduce(const T* in, T* out, std::size_t count, int root, Op op = {}, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather, broadcast, all_to_all, gather and "
                  "scatter");
    detail::check_collective<collective::reduce>("reduce", in, out, count, root, rank(), world());
    run<collective::reduce, algo::direct, B>("reduce", in, out, count, root, op, o);
  }

  /// in and out: world blocks of `count`; block p of in goes to rank p, where it lands as block
  /// (this rank) of out. Not in place: in and out must not overlap.
  template <class B = dma::automatic, element T>
  void all_to_all(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    detail::check_collective<collective::all_to_all>("all_to_all", in, out, count, 0, rank(), world());
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_now().template gather<collective::all_to_all>(rt_, reg_, "all_to_all", in, out, count,
                                                              count * world(), 0, true, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::all_to_all, algo::direct, B>("all_to_all", in, out, count, 0, op::sum{}, o);
  }

  /// root's out (world blocks of `count`): block r = rank r's in. Other ranks' out is not used
  /// (may be null). In place at the root when its in == out + root * count.
  template <class B = dma::automatic, element T>
  void gather(const T* in, T* out, std::size_t count, int root, const call_options<P>& o = {}) {
    // over the copy engine every rank names where the root's out is
    const bool ce = o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>;
    detail::check_collective<collective::gather>("gather", in, out, count, root, rank(), world(), ce);
    if (ce)
      return ce_now().template gather<collective::gather>(rt_, reg_, "gather", in, out, count,
                                                          count * world(), root,
                                                          rank() == root && in != out + root * count, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::gather, algo::direct, B>("gather", in, out, count, root, op::sum{}, o);
  }

  /// out (count elements) = block `rank` of root's in (world blocks of `count`). Other ranks' in
  /// is not used (may be null). In place at the root when its out == in + root * count.
  template <class B = dma::automatic, element T>
  void scatter(const T* in, T* out, std::size_t count, int root, const call_options<P>& o = {}) {
    detail::check_collective<collective::scatter>("scatter", in, out, count, root, rank(), world());
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_now().template gather<collective::scatter>(rt_, reg_, "scatter", in, out, count, count, root,
                                                           rank() == root && out != in + root * count, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::scatter, algo::direct, B>("scatter", in, out, count, root, op::sum{}, o);
  }

  // -- point-to-point -----------------------------------------------------------------------------
  /// Sends `count` elements at `buf` to rank `peer`, which receives them with recv(..., this
  /// rank). Only the two ranks take part. Outside a group, a group of one: it ends (on its
  /// stream) once the peer received it; a send whose receive never comes is a timeout error.
  /// Inside a group (group_start / group_end), issued with the group's other operations.
  /// B: the DMA backend of the group (automatic: by each operation's size, see
  /// issue_p2p_by_size).
  template <class B = dma::automatic, element T>
  void send(const T* buf, std::size_t count, int peer, const call_options<P>& o = {}) {
    detail::check_elements<T>("send", count, 1);
    detail::check_buffer("send", "buffer", buf, count);
    add_p2p<B>("send", make_p2p_op<T>(p2p_op::send, buf, count, peer), o);
  }
  /// Receives `count` elements from rank `peer` into `buf` (see send).
  template <class B = dma::automatic, element T>
  void recv(T* buf, std::size_t count, int peer, const call_options<P>& o = {}) {
    detail::check_elements<T>("recv", count, 1);
    detail::check_buffer("recv", "buffer", buf, count);
    add_p2p<B>("recv", make_p2p_op<T>(p2p_op::recv, buf, count, peer), o);
  }
  /// Opens a group (NCCL's ncclGroupStart). The sends and receives made until the matching
  /// group_end() are issued together, as one launch (two over the automatic backend when both
  /// small and large operations are in it: issue_p2p_by_size), and cannot deadlock on their order: each
  /// rank lists its own in any order (the pairs' sends and receives in the same order), e.g. a
  /// send to and a receive from the same peer, a ring shift, all pairs. The collectives made in
  /// it are batched: consecutive calls of one collective, element type, op type, algorithm and
  /// backend choice (as named), with the same options, run in one launch (up to
  /// detail::batch_max_calls a launch; see launch_batch), in call order, before the sends and
  /// receives. Every rank makes its collectives in the same order, as outside a group. A call
  /// that cannot be batched (the copy engine's, a zero-copy one, launch()) runs at once, after
  /// the batches before it. Arguments are checked at each call; nothing is issued until the
  /// outermost group_end(). Groups nest.
  void group_start() { ++group_depth_; }
  /// Closes a group; the outermost issues its operations (each on its stream).
  void group_end() {
    if (group_depth_ == 0) detail::throw_invalid("group_end", "no group_start() is open");
    if (--group_depth_ > 0) return;
    pending p = std::exchange(pending_, pending{});
    issue_batches();
    if (!p.ops.empty()) p.issue(*this, p);
  }

  /// Runs `calls` as one launch: any mix of collectives (ark::calls::all_reduce, reduce_scatter,
  /// all_gather, broadcast, reduce, all_to_all, gather, scatter) and sends and receives
  /// (ark::calls::send, recv); collectives/fused.hpp. Every rank lists the same collectives in
  /// the same order, as outside a group; its sends and receives are its own, in any order (they
  /// cannot deadlock), met by the peers' receives and sends in their fused groups. The calls run
  /// at once, as in an NCCL group: a buffer that one call writes may not be another's (refused).
  /// Each call is checked as it would be alone, and the group refused whole before anything
  /// launches. The collectives run staged (never the copy engine or zero-copy) with the workers
  /// their plans give, within block_cap() and max_ctas for the whole launch less the
  /// point-to-point workers' share (reserved on every rank, so that the collectives' workers do
  /// not depend on a rank's own sends); call_options::workers sets each collective's workers
  /// and the sends' and receives' alike. Inside group_start/group_end it runs at once, after the
  /// batches before it.
  template <detail::fused_call... C>
  requires(sizeof...(C) > 0) void group(const C&... calls) { group(call_options<P>{}, calls...); }
  template <detail::fused_call... C>
  requires(sizeof...(C) > 0) void group(const call_options<P>& o, C... calls) {
    const char* call = "group";
    using Bp = typename detail::p2p_backend_of<C...>::type;
    constexpr unsigned np = (0u + ... + static_cast<unsigned>(detail::is_p2p_call<C>));
    constexpr bool collectives = (detail::is_collective_call<C> || ...);
    static_assert(np <= p2p_max_ops, "ark: a group holds at most p2p_max_ops sends and receives");
    rt_.check_usable(call);
    detail::check_options(rt_, call, o);
    if (o.max_ctas == 0)
      detail::throw_invalid(call, "max_ctas = 0: a fused group runs on the SMs; give it at least one block");
    pending g{{}, o, nullptr};
    std::vector<fused_access> used;
    unsigned index = 0;
    auto check = [&](const auto& c) {
      using K = std::decay_t<decltype(c)>;
      using T = typename K::element_type;
      const std::string name = std::string(call) + " (call " + std::to_string(index) + ", ";
      if constexpr (detail::is_collective_call<K>) {
        const std::string n = name + to_string(K::kind) + ")";
        detail::check_collective<K::kind>(n.c_str(), c.in, c.out, c.count, c.root, rank(), world());
        const detail::collective_extent e = detail::extent_of<K::kind>(c.count, c.root, rank(), world());
        if (e.uses_in) used.push_back({c.in, e.in * sizeof(T), false, index});
        if (e.uses_out) used.push_back({c.out, e.out * sizeof(T), true, index});
      } else {
        const bool recv = c.kind == p2p_op::recv;
        const std::string n = name + (recv ? "recv)" : "send)");
        detail::check_elements<T>(n.c_str(), c.count, 1); // as communicator::send and recv check
        detail::check_buffer(n.c_str(), "buffer", c.buf, c.count);
        const p2p_op op = make_p2p_op<T>(c.kind, c.buf, c.count, c.peer);
        check_p2p<Bp>(n.c_str(), op, o);
        g.ops.push_back(op);
        used.push_back({c.buf, c.count * sizeof(T), recv, index});
      }
      ++index;
    };
    (check(calls), ...);
    check_fused_overlap(used);
    if (np) check_p2p_group(*this, g, call);
    // The launch's blocks: the collectives' plans within what a call may use less the
    // point-to-point workers' share, reserved whether or not this rank has sends or receives
    // (the same collectives must get the same workers on every rank, whose sends are their own).
    unsigned cap = rt_.block_cap();
    if (o.max_ctas > 0)
      cap = cap ? std::min(cap, static_cast<unsigned>(o.max_ctas)) : static_cast<unsigned>(o.max_ctas);
    unsigned reserved = 0; // the point-to-point workers a group of this list may have
    if (rt_.lay().p2p > 0 && !(collectives && cap == 1))
      reserved = p2p_workers_of(rt_, o, collectives && cap ? cap - 1 : cap);
    if (np && !reserved)
      detail::throw_invalid(call, "a group of collectives and sends or receives needs two blocks at least; "
                                  "max_ctas or block_cap() leaves one");
    const unsigned pw = np ? reserved : 0;
    call_options<P> oc = o;
    if (cap && reserved && collectives) {
      if (reserved >= cap)
        detail::throw_invalid(call, "workers " + std::to_string(reserved) +
                                        " for the sends and receives leave the "
                                        "collectives none of the " +
                                        std::to_string(cap) + " blocks a call may use");
      oc.max_ctas = static_cast<int>(cap - reserved);
    }
    unsigned cw = 0, planned = 0;
    auto plan_one = [&](auto& c) {
      using K = std::decay_t<decltype(c)>;
      if constexpr (detail::is_collective_call<K>) {
        using T = typename K::element_type;
        ark::with_choice<K::kind, typename K::algorithm, typename K::backend>(
            select(K::kind, c.count * sizeof(T), world(), rt_.cfg().tuning), [&](auto, auto b) {
              detail::check_backend<decltype(b)>(rt_.lay(), to_string(K::kind));
              return true;
            });
        try {
          c.workers =
              detail::plan_call<K::kind, typename K::algorithm, typename K::backend, T>(rt_, c.count, oc)
                  .ctas;
        } catch (const invalid_argument& e) { // name the call's place, and the blocks it was planned in
          detail::throw_invalid(call,
                                "call " + std::to_string(planned) + ", planned within " +
                                    (oc.max_ctas > 0 ? std::to_string(oc.max_ctas) : std::string("all")) +
                                    " blocks: " + e.what());
        }
        cw = std::max(cw, c.workers);
      }
    };
    ((plan_one(calls), ++planned), ...);
    detail::check_block_cap(rt_, call, cw + pw);
    std::vector<p2p_op> ops = joined(g, rank());
    unsigned small = 0;
    if constexpr (std::is_same_v<Bp, dma::automatic>) { // as issue_p2p_by_size: LL-sized ones first
      const std::size_t ll = rt_.cfg().tuning.ll_max_bytes;
      small = static_cast<unsigned>(
          std::stable_partition(ops.begin(), ops.end(),
                                [&](const p2p_op& x) { return x.count * x.elem <= ll; }) -
          ops.begin());
    }
    issue_batches();
    detail::fused_work<P, Bp, np, detail::device_part<C>...> work{
        rt_.call_handle(o),
        detail::make_call_list(detail::device_part_of(calls)...),
        cw,
        pw,
        small,
        static_cast<unsigned>(ops.size()),
        {}};
    std::copy(ops.begin(), ops.end(), work.ops);
    const auto turn = rt_.join_previous(o);
    // a queue backend's sends (dma::proxy_engine) are enqueued as its own calls are: with the
    // device-graph launcher beside the kernel where graphs serve it
    using Bl = std::conditional_t<dma::queue_backend<Bp>, Bp, dma::thread_copy<1>>;
    engines_.template enqueue<Bl>(rt_, turn.s, launch_shape{cw + pw, rt_.cfg().tuning.threads}, work);
    rt_.mark_call(turn);
    rt_.after_launch(call);
  }

  /// All-to-all with counts of its own per pair: send_counts[p] elements at in + send_offsets[p]
  /// go to rank p, which receives recv_counts[q] elements from each rank q at out +
  /// recv_offsets[q] (offsets in elements). A count must equal its peer's count for the pair (a
  /// mismatch error on both otherwise); zero counts are allowed. A group of world sends and
  /// world receives (this rank's own block copied locally).
  template <class B = dma::automatic, element T>
  void all_to_allv(const T* in, const std::size_t* send_counts, const std::size_t* send_offsets, T* out,
                   const std::size_t* recv_counts, const std::size_t* recv_offsets,
                   const call_options<P>& o = {}) {
    if (!send_counts || !send_offsets || !recv_counts || !recv_offsets)
      detail::throw_invalid("all_to_allv",
                            "the count and offset arrays (world entries each) must not be null");
    auto check_block = [](const char* name, const T* buf, std::size_t count, std::size_t offset) {
      detail::check_elements<T>("all_to_allv", count, 1);
      detail::check_elements<T>("all_to_allv", offset, 1);
      detail::check_buffer("all_to_allv", name, buf, count + offset);
    };
    for (int p = 0; p < world(); ++p) {
      check_block("send buffer", in, send_counts[p], send_offsets[p]);
      check_block("recv buffer", out, recv_counts[p], recv_offsets[p]);
    }
    if (send_counts[rank()] != recv_counts[rank()])
      detail::throw_invalid("all_to_allv", "this rank sends itself " + std::to_string(send_counts[rank()]) +
                                               " elements but receives " +
                                               std::to_string(recv_counts[rank()]) + " from itself");
    group_start();
    try {
      for (int p = 0; p < world(); ++p) {
        send<B>(in + send_offsets[p], send_counts[p], p, o);
        recv<B>(out + recv_offsets[p], recv_counts[p], p, o);
      }
    } catch (...) { // nothing of this call is issued (in an outer group, what it added stays)
      if (--group_depth_ == 0) pending_ = pending{}, batches_.clear();
      throw;
    }
    group_end();
  }

  /// Runs a custom collective: f(ctx) on every worker, ctx being a context<P, B, scope> (see
  /// examples/03). f returns false after a failure it recorded through ctx.
  template <class B = dma::thread_copy<default_depth>, class F>
  void launch(const F& f, unsigned workers = 1, const call_options<P>& o = {}) {
    static_assert(dma_backend<B>, "ark: B is not a DMA backend");
    rt_.check_usable("launch");
    if (workers < 1 || workers > rt_.lay().workers)
      detail::throw_invalid("launch", "workers must be in [1, " + std::to_string(rt_.lay().workers) +
                                          "] (team_config.workers, or with automatic slots the workers "
                                          "whose slots fit in team_config.scratch_budget)");
    detail::check_block_cap(rt_, "launch", workers);
    detail::check_options(rt_, "launch", o);
    if (o.max_ctas == 0)
      detail::throw_invalid("launch", "max_ctas = 0 (the copy engine alone) leaves a custom collective no "
                                      "block to run on: give it at least one");
    if (o.max_ctas > 0 && workers > static_cast<unsigned>(o.max_ctas))
      detail::throw_invalid("launch", "workers " + std::to_string(workers) + " exceeds max_ctas " +
                                          std::to_string(o.max_ctas));
    detail::check_backend<B>(rt_.lay(), "launch");
    issue_batches();
    const auto turn = rt_.join_previous(o);
    engines_.template enqueue<B>(rt_, turn.s, launch_shape{workers, rt_.cfg().tuning.threads},
                                 detail::custom_work<P, B, F>{rt_.call_handle(o), f});
    rt_.mark_call(turn);
    rt_.after_launch("launch");
  }

  /// What collective K with algorithm A over backend B (either may be automatic) on `count`
  /// elements of T per rank will use: thread blocks, threads, the symmetric scratch its channels
  /// occupy, whether only the copy engine moves data. Throws invalid_argument for options the
  /// call would reject.
  template <collective K, class A = algo::automatic, class B = dma::automatic, element T>
  call_plan plan(std::size_t count, const call_options<P>& o = {}) const {
    return detail::plan_call<K, A, B, T>(rt_, count, o, std::is_same_v<A, algo::zero_copy>);
  }

  /// The plan of the call on these buffers: as plan(count, o), and zero-copy where the call
  /// would read registered buffers in place (algo::zero_copy named, or chosen automatically).
  template <collective K, class A = algo::automatic, class B = dma::automatic, element T>
  call_plan plan(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) const {
    const bool zc = zero_copy_views<K, A, B>(to_string(K), in, out, count, o).use;
    return detail::plan_call<K, A, B, T>(rt_, count, o, zc);
  }

  // -- symmetric memory ---------------------------------------------------------------------------
  /// Collective: registers `bytes` at `p` on every rank (the same size everywhere), so that peers
  /// can address it: remote(p, peer) and window(p) then work. Peers in other processes map it
  /// through IPC, which maps one allocation: the bytes must lie in one. Kept until
  /// deregister_buffer(p) or the communicator's end: the memory must outlive it.
  const window_view& register_buffer(void* p, std::size_t bytes) { return reg_.add(rt_, p, bytes); }

  /// Collective: undoes register_buffer(p, ...) on every rank (`p` as registered), so that the
  /// buffer may be freed. No call that uses it may still run on any rank: synchronize the streams
  /// you enqueued them on first. Waits for every rank (the bootstrap's bound) before it unmaps, so
  /// that no rank frees its buffer while a peer still reaches it; views of it (register_buffer's
  /// result, window(), remote()) are invalid afterwards.
  void deregister_buffer(void* p) {
    reg_.remove(rt_, p, [this] { drain(); });
  }

  /// The registered window containing [p, p + bytes); throws invalid_argument if there is none.
  const window_view& window(const void* p, std::size_t bytes = 1) const {
    if (const window_view* w = reg_.find(p, bytes, rank())) return *w;
    detail::throw_invalid("remote", "buffer " + detail::pointer_name(p) + " (" + std::to_string(bytes) +
                                        " bytes) is not inside a buffer registered with this communicator");
  }

  /// `count` elements at p as a symmetric buffer (team/symmetric.hpp), for zero-copy calls from
  /// your kernels (device_comm's all_reduce, reduce_scatter, all_gather on symmetric buffers).
  /// Every rank's p must lie at the same place of the same registration (a call compares them);
  /// throws invalid_argument if p is not in one registered buffer.
  template <class T>
  ark::symmetric<T> symmetric(T* p, std::size_t count) const {
    const ark::symmetric<T> s = reg_.symmetric_of(p, count, rank());
    if (!s.bases)
      detail::throw_invalid("symmetric",
                            "buffer " + detail::pointer_name(p) + " (" + std::to_string(count * sizeof(T)) +
                                " bytes) is not inside a buffer registered with this communicator");
    return s;
  }

  /// Where rank `peer`'s copy of the registered local address `p` lives in this address space.
  void* remote(const void* p, int peer) const {
    if (peer < 0 || peer >= world())
      detail::throw_invalid("remote", "peer " + std::to_string(peer) + " is out of range");
    const window_view& w = window(p);
    return w.base[peer] + (static_cast<const std::byte*>(p) - w.base[rank()]);
  }

  // -- errors -------------------------------------------------------------------------------------
  /// Makes every wait of this rank fail promptly (from any thread); later calls throw aborted_error.
  void abort() { rt_.abort(); }
  bool aborted() const { return rt_.aborted(); }
  /// The first failure recorded on this rank (code 0: none).
  error_record last_error() const { return rt_.last_error(); }
  /// Waits for the stream, then throws if a call failed.
  void synchronize() { rt_.synchronize(); }

private:
  /// The operations of the open group, and how they are issued (over the group's backend).
  struct pending {
    std::vector<p2p_op> ops;
    call_options<P> opts{};
    void (*issue)(communicator&, const pending&) = nullptr;
  };

  /// A buffer one call of a fused group reads or writes, to refuse one that another call writes.
  struct fused_access {
    const void* p;
    std::size_t bytes;
    bool writes;
    unsigned call;
  };
  static void check_fused_overlap(const std::vector<fused_access>& used) {
    for (const fused_access& w : used)
      for (const fused_access& x : used) {
        if (!w.writes || w.call == x.call || !w.bytes || !x.bytes) continue;
        const auto* a = static_cast<const std::byte*>(w.p);
        const auto* b = static_cast<const std::byte*>(x.p);
        if (a < b + x.bytes && b < a + w.bytes)
          detail::throw_invalid("group", "call " + std::to_string(w.call) + " writes a buffer that call " +
                                             std::to_string(x.call) + (x.writes ? " writes" : " reads") +
                                             ": the calls of a fused group run at once");
      }
  }

  /// One send or receive over B (its buffer checked by the caller): its peer, its options, the
  /// point-to-point workers and the backend it needs.
  template <class B>
  void check_p2p(const char* call, const p2p_op& op, const call_options<P>& o) const {
    if (op.peer < 0 || op.peer >= world())
      detail::throw_invalid(call, "peer " + std::to_string(op.peer) + " is outside [0, " +
                                      std::to_string(world()) + ")");
    detail::check_options(rt_, call, o);
    if (rt_.lay().p2p == 0)
      detail::throw_invalid(call,
                            "team_config.p2p_workers is 0: this communicator has no point-to-point workers");
    if (o.max_ctas == 0)
      detail::throw_invalid(call, "max_ctas = 0: send and recv run on the SMs; give them at least one block");
    if (o.workers > rt_.lay().p2p)
      detail::throw_invalid(call, "workers " + std::to_string(o.workers) +
                                      " exceeds team_config.p2p_workers " + std::to_string(rt_.lay().p2p));
    detail::check_backend<or_thread_copies<B>>(rt_.lay(), call);
    if (o.workers) detail::check_block_cap(rt_, call, o.workers);
  }

  /// Checks one send or receive (its buffer checked by the caller) and issues it, or adds it to
  /// the open group.
  template <class B>
  void add_p2p(const char* call, const p2p_op& op, const call_options<P>& o) {
    static_assert(!std::is_same_v<B, dma::copy_engine>, "ark: send and recv run over a channel backend");
    constexpr bool automatic = std::is_same_v<B, dma::automatic>;
    rt_.check_usable(call);
    check_p2p<B>(call, op, o);
    constexpr auto issue =
        automatic ? &communicator::issue_p2p_by_size : &communicator::issue_p2p<or_thread_copies<B>>;
    if (group_depth_ == 0) {
      pending one;
      one.ops.push_back(op);
      one.opts = o;
      issue(*this, one);
      return;
    }
    if (!pending_.ops.empty()) {
      const call_options<P>& f = pending_.opts;
      if (pending_.issue != issue)
        detail::throw_invalid(
            call, "a group runs over one backend: this operation names another than the group's first");
      if (f != o)
        detail::throw_invalid(
            call, "a group's operations share their options (stream, workers, max_ctas, timeout): "
                  "this one's differ from the group's first");
    }
    if (pending_.ops.size() == p2p_max_ops)
      detail::throw_invalid(call,
                            "a group holds at most " + std::to_string(p2p_max_ops) + " sends and receives");
    pending_.ops.push_back(op);
    pending_.opts = o;
    pending_.issue = issue;
  }

  /// The automatic backend of a group: each operation by its size, as select() picks for the
  /// collectives (LL packets up to tuning::ll_max_bytes, thread copies above). A send and its
  /// receive carry the same bytes, so both ranks class each pair alike, and the group is issued as
  /// two launches at most, the LL one first: every pair's operations lie in the same launch on both
  /// of its ranks, so each launch completes on its own whatever the other holds. (A receive whose
  /// count differs from its send's across the bound meets it in the other launch: both time out,
  /// where counts on the same side of it are a mismatch error.)
  static void issue_p2p_by_size(communicator& c, const pending& g) {
    check_p2p_group(c, g);
    pending small{{}, g.opts, g.issue}, large = small;
    for (const p2p_op& op : g.ops)
      (op.count * op.elem <= c.rt_.cfg().tuning.ll_max_bytes ? small : large).ops.push_back(op);
    if (!small.ops.empty()) launch_p2p<dma::ll_packet<default_depth>>(c, small);
    if (!large.ops.empty()) launch_p2p<dma::thread_copy<default_depth>>(c, large);
  }

  template <class B>
  static void issue_p2p(communicator& c, const pending& g) {
    check_p2p_group(c, g);
    launch_p2p<B>(c, g);
  }

  /// Refuses a group whose sends to this rank do not match its receives from it, or whose
  /// receive's buffer overlaps another operation's.
  static void check_p2p_group(communicator& c, const pending& g, const char* call = "group_end") {
    std::vector<std::size_t> self_sends, self_recvs;
    for (std::size_t i = 0; i < g.ops.size(); ++i)
      if (g.ops[i].peer == c.rank()) (g.ops[i].kind == p2p_op::send ? self_sends : self_recvs).push_back(i);
    if (self_sends.size() != self_recvs.size())
      detail::throw_invalid(call, "a send to this rank needs its receive from this rank in the same group (" +
                                      std::to_string(self_sends.size()) + " sends, " +
                                      std::to_string(self_recvs.size()) + " receives)");
    for (std::size_t k = 0; k < self_sends.size(); ++k) {
      const p2p_op &s = g.ops[self_sends[k]], &r = g.ops[self_recvs[k]];
      if (s.count * s.elem != r.count * r.elem || s.dtype != r.dtype)
        detail::throw_invalid(
            call, "send " + std::to_string(k) + " to this rank carries " + std::to_string(s.count) +
                      " elements of another size or type than its receive's " + std::to_string(r.count));
    }
    // a receive writes while the group's other operations read or write: no buffer may overlap
    // a receive's (sends may share theirs)
    auto bytes_of = [](const p2p_op& o) { return o.count * o.elem; };
    for (std::size_t i = 0; i < g.ops.size(); ++i)
      for (std::size_t j = 0; j < g.ops.size(); ++j) {
        const p2p_op &r = g.ops[i], &x = g.ops[j];
        if (i == j || r.kind != p2p_op::recv || !bytes_of(r) || !bytes_of(x) ||
            (x.kind == p2p_op::recv && j < i))
          continue;
        if (r.buf < x.buf + bytes_of(x) && x.buf < r.buf + bytes_of(r))
          detail::throw_invalid(call, "a receive's buffer overlaps another operation's in the group (" +
                                          std::string(x.kind == p2p_op::recv ? "a receive" : "a send") + ")");
      }
  }

  /// A checked group's operations as the workers run them: each send to this rank joined to
  /// its receive from it, in order (one local copy each).
  static std::vector<p2p_op> joined(const pending& g, int rank) {
    std::vector<p2p_op> ops;
    std::vector<std::size_t> self_sends;
    for (std::size_t i = 0; i < g.ops.size(); ++i)
      if (g.ops[i].peer == rank && g.ops[i].kind == p2p_op::send) self_sends.push_back(i);
    std::size_t k = 0;
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      p2p_op op = g.ops[i];
      if (op.peer == rank) {
        if (op.kind == p2p_op::send) continue; // joined to its receive
        op.src = g.ops[self_sends[k++]].buf;
        op.kind = p2p_op::self;
      }
      ops.push_back(op);
    }
    return ops;
  }
  /// The point-to-point workers of a group with options `o`: the caller's, or every one the
  /// team holds; at most max_ctas, and at most `cap` (block_cap(), or what a fused group's
  /// collectives leave) unless asked for.
  static unsigned p2p_workers_of(const rank_runtime<P>& rt, const call_options<P>& o, unsigned cap) {
    unsigned workers = o.workers ? o.workers : rt.lay().p2p;
    if (o.max_ctas > 0 && workers > static_cast<unsigned>(o.max_ctas))
      workers = static_cast<unsigned>(o.max_ctas);
    if (!o.workers && cap && workers > cap) workers = cap;
    return workers;
  }

  /// Launches a checked group on the point-to-point workers over backend B.
  template <class B>
  static void launch_p2p(communicator& c, const pending& g) {
    const char* call = "group_end";
    p2p_ops ops;
    for (const p2p_op& op : joined(g, c.rank())) ops.op[ops.n++] = op;
    rank_runtime<P>& rt = c.rt_;
    const call_options<P>& o = g.opts;
    const unsigned workers = p2p_workers_of(rt, o, rt.block_cap());
    const device_comm<P> handle = rt.call_handle(o);
    const auto turn = rt.join_previous(o);
    c.engines_.template enqueue<B>(rt, turn.s, launch_shape{workers, rt.cfg().tuning.threads},
                                   detail::p2p_work<P, B>{handle, ops});
    rt.mark_call(turn);
    rt.after_launch(g.ops.size() == 1 ? (g.ops[0].kind == p2p_op::send ? "send" : "recv") : call);
  }

  /// A collective over a channel backend: planned, joined to the previous call, launched.
  template <collective K, class A, class B, class T, class Op>
  void run(const char* call, const T* in, T* out, std::size_t count, int root, const Op& op,
           const call_options<P>& o) {
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    rt_.check_usable(call);
    if constexpr (reads_in_place<K, A, B>)
      if (const auto v = zero_copy_views<K, A, B>(call, in, out, count, o); v.use) {
        issue_batches();
        return run_zero_copy<K, A, B>(call, v, out, count, op, o);
      }
    const call_plan cp = plan<K, A, B, T>(count, o);
    if constexpr (batchable<Op>)
      if (group_depth_ > 0) return add_to_batch<K, A, B>(in, out, count, root, op, o);
    issue_batches();
    const launch_shape shape{cp.ctas, rt_.cfg().tuning.threads};
    const device_comm<P> handle = rt_.call_handle(o);
    const auto turn = rt_.join_previous(o);
    // resolve an automatic choice here: each launch then runs the one algorithm it needs
    ark::with_choice<K, A, B>(select(K, count * sizeof(T), world(), rt_.cfg().tuning), [&](auto a, auto b) {
      using A1 = decltype(a);
      using B1 = decltype(b);
      detail::check_backend<B1>(rt_.lay(), call);
      // an automatic one-shot all-reduce whose every share fits one LL step runs algo::one_step's
      // kernel: the same algorithm and protocol, without the pipelined path beside it, which
      // slows the latency path by being compiled into the same kernel (docs/perf.md). An
      // algorithm the caller names is run as named.
      if constexpr (K == collective::all_reduce && std::is_same_v<A, algo::automatic> &&
                    std::is_same_v<A1, algo::one_shot> && B1::ll) {
        if (cp.one_step) {
          engines_.template enqueue<B1>(
              rt_, turn.s, shape,
              detail::collective_work<P, K, algo::one_step, B1, T, Op>{handle, in, out, count, root, op});
          return true;
        }
      }
      engines_.template enqueue<B1>(
          rt_, turn.s, shape, detail::collective_work<P, K, A1, B1, T, Op>{handle, in, out, count, root, op});
      return true;
    });
    rt_.mark_call(turn);
    rt_.after_launch(call);
  }

  // -- batches (collectives in a group) ----------------------------------------------------------
  /// A group's collectives, waiting for its end: a batch per run of like calls.
  struct deferred {
    virtual ~deferred() = default;
    virtual void issue(communicator&) = 0;
  };
  template <collective K, class A, class B, class T, class Op>
  struct batch final : deferred {
    call_options<P> opts;
    detail::collective_batch<T, Op> calls;
    explicit batch(const call_options<P>& o) : opts(o) {}
    void issue(communicator& c) override { c.launch_batch<K, A, B>(opts, calls); }
  };
  /// An op a batch can carry in a kernel's parameters.
  template <class Op>
  static constexpr bool batchable = std::is_default_constructible_v<Op>&& std::is_trivially_copyable_v<Op>;

  /// Adds a checked call to the open group: to the last batch if it is of the same kind and
  /// options and has room, else to a new one.
  template <collective K, class A, class B, class T, class Op>
  void add_to_batch(const T* in, T* out, std::size_t count, int root, const Op& op,
                    const call_options<P>& o) {
    using batch_t = batch<K, A, B, T, Op>;
    auto* b = batches_.empty() ? nullptr : dynamic_cast<batch_t*>(batches_.back().get());
    if (!b || b->calls.n == detail::batch_max_calls || b->opts != o) {
      batches_.push_back(std::make_unique<batch_t>(o));
      b = static_cast<batch_t*>(batches_.back().get());
    }
    b->calls.call[b->calls.n++] = {in, out, count, root, 0, op};
  }

  /// Issues the open group's batches so far, in order.
  void issue_batches() {
    if (batches_.empty()) return;
    for (auto& b : std::exchange(batches_, {})) b->issue(*this);
  }

  /// The copy-engine protocol, once the batches before the call are issued (calls keep their order).
  ce_protocol<P>& ce_now() {
    issue_batches();
    return ce_;
  }

  /// Launches a batch as one kernel: the algorithm and backend are chosen (where automatic) for
  /// its largest call, so that one kernel runs them all; each call runs with the workers its own
  /// plan gives under that choice, so that a small call takes no more blocks than alone.
  template <collective K, class A, class B, class T, class Op>
  void launch_batch(const call_options<P>& o, detail::collective_batch<T, Op> calls) {
    const char* call = "group_end";
    std::size_t most = 0;
    for (unsigned i = 0; i < calls.n; ++i) most = std::max(most, calls.call[i].count);
    const device_comm<P> handle = rt_.call_handle(o);
    const auto turn = rt_.join_previous(o);
    ark::with_choice<K, A, B>(select(K, most * sizeof(T), world(), rt_.cfg().tuning), [&](auto a, auto b) {
      using A1 = decltype(a);
      using B1 = decltype(b);
      detail::check_backend<B1>(rt_.lay(), call);
      unsigned ctas = 1;
      for (unsigned i = 0; i < calls.n; ++i) {
        auto& c = calls.call[i];
        c.workers = detail::plan_call<K, A1, B1, T>(rt_, c.count, o).ctas;
        ctas = std::max(ctas, c.workers);
      }
      engines_.template enqueue<B1>(rt_, turn.s, launch_shape{ctas, rt_.cfg().tuning.threads},
                                    detail::batch_work<P, K, A1, B1, T, Op>{handle, calls});
      return true;
    });
    rt_.mark_call(turn);
    rt_.after_launch(call);
  }

  /// Whether a call of collective K by A over B may read its buffers in place (algo::zero_copy):
  /// named, or chosen automatically, over thread copies or an engine backend (B automatic, or
  /// one that is not LL packets).
  template <class B>
  static constexpr bool moves_in_place() {
    if constexpr (std::is_same_v<B, dma::automatic>)
      return true;
    else if constexpr (dma_backend<B>)
      return !B::ll;
    else
      return false;
  }
  template <collective K, class A, class B>
  static constexpr bool reads_in_place = (K == collective::all_reduce || K == collective::reduce_scatter ||
                                          K == collective::all_gather) &&
                                         (std::is_same_v<A, algo::zero_copy> ||
                                          (std::is_same_v<A, algo::automatic> && moves_in_place<B>()));

  /// The symmetric views a zero-copy call of K reads (algorithms/zero_copy.hpp), when A names
  /// zero-copy or the automatic choice takes it for these buffers (select_zero_copy); `use` false
  /// when the staged call serves it. Throws where A names zero-copy on buffers not registered.
  template <class T>
  struct in_place_views {
    bool use = false;
    ark::symmetric<const T> in;
    ark::symmetric<T> out;
  };
  template <collective K, class A, class B, class T>
  in_place_views<T> zero_copy_views(const char* call, const T* in, T* out, std::size_t count,
                                    const call_options<P>& o) const {
    in_place_views<T> v;
    constexpr bool named = std::is_same_v<A, algo::zero_copy>;
    if constexpr (reads_in_place<K, A, B>) {
      // device graphs copy staging slots alone (their copies are made before any call)
      const bool engine_served = !dma::queue_backend<B> || !dma::graphs_serve(rt_.team());
      if (named && !engine_served)
        detail::throw_invalid(call, "algo::zero_copy over dma::proxy_engine needs engine_path::proxy: device "
                                    "graphs copy the staging slots alone");
      // an automatic choice looks the buffers up only for calls it would take zero-copy for
      if (!named && (o.max_ctas == 0 || !engine_served ||
                     !select_zero_copy(K, count * sizeof(T), world(), rt_.cfg().tuning)))
        return v;
      const std::size_t in_count = K == collective::reduce_scatter ? count * world() : count;
      // an in-place all-gather reads every rank's block of the output
      const bool gather_in_place = K == collective::all_gather && in == out + rank() * count;
      v.in = gather_in_place ? reg_.template symmetric_of<const T>(out, count * world(), rank())
                             : reg_.symmetric_of(in, in_count, rank());
      v.out = reg_.symmetric_of(out, count, rank());
      const bool registered = v.in.bases && (K != collective::all_reduce || v.out.bases);
      if (named && !registered)
        detail::throw_invalid(
            call, std::string("algo::zero_copy reads the peers' buffers in place: register the ") +
                      (K == collective::all_reduce ? "send and recv buffers"
                       : gather_in_place           ? "recv buffer"
                                                   : "send buffer") +
                      " first (register_buffer), at the same place on every rank");
      v.use = registered;
    }
    return v;
  }

  /// A zero-copy call over the views zero_copy_views gave.
  template <collective K, class A, class B, class T, class Op>
  void run_zero_copy(const char* call, const in_place_views<T>& v, T* out, std::size_t count, const Op& op,
                     const call_options<P>& o) {
    using B1 = or_thread_copies<B>;
    const call_plan cp = detail::plan_call<K, A, B, T>(rt_, count, o, true);
    detail::check_backend<B1>(rt_.lay(), call, true);
    const launch_shape shape{cp.ctas, rt_.cfg().tuning.threads};
    const device_comm<P> handle = rt_.call_handle(o);
    const auto turn = rt_.join_previous(o);
    if constexpr (K == collective::all_reduce)
      engines_.template enqueue<B1>(
          rt_, turn.s, shape,
          detail::zero_copy_work<P, K, B1, T, ark::symmetric<T>, Op>{handle, v.in, v.out, count, op});
    else
      engines_.template enqueue<B1>(
          rt_, turn.s, shape, detail::zero_copy_work<P, K, B1, T, T*, Op>{handle, v.in, out, count, op});
    rt_.mark_call(turn);
    rt_.after_launch(call);
  }

  /// Waits for what runs on the communicator's own streams.
  void drain() {
    P::synchronize(rt_.own_stream());
    ce_.drain();
  }

  /// Stops the engines and releases what the communicator made; the memory peers may write into
  /// (the region, the engine queues, the control block) only when `memory`.
  void release(bool memory) noexcept {
    engines_.release(memory);
    reg_.clear(rank(), world());
    ce_.release();
    rt_.release(memory);
  }

  // declared in the order they are made; destroyed after release() in reverse
  rank_runtime<P> rt_;
  registry<P> reg_;
  ce_protocol<P> ce_;
  engine_servers<P> engines_;
  unsigned group_depth_ = 0;                       ///< group_start()s not yet closed
  bool quiet_ = false;                             ///< close() ran and every rank arrived in it
  pending pending_;                                ///< the open group's sends and receives
  std::vector<std::unique_ptr<deferred>> batches_; ///< the open group's collectives
};

} // namespace ark
