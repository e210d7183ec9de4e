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

#include "ark/collectives/works.hpp"
#include "ark/communicator/ce_protocol.hpp"
#include "ark/communicator/engines.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>

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

  /// Collective: waits (bounded) for every rank to arrive before freeing memory peers write into.
  /// If a peer never arrives, the region is leaked rather than freed under a late writer.
  ~communicator() {
    bool quiet = false;
    try {
      auto* c = rt_.control_host();
      // what still runs on our streams ends first, sooner while an abort is still raised
      engines_.quiesce();
      drain();
      clear_error(*c);
      P::zero(rt_.lay().claim(rt_.team().local()), sizeof(std::uint32_t));
      P::launch(rt_.own_stream(), launch_shape{1, 1}, detail::barrier_work<P>{rt_.device_handle()});
      P::synchronize(rt_.own_stream());
      quiet = read_error(*c).code == 0;
    } catch (...) {
    }
    release(quiet);
  }

  int rank() const { return rt_.rank(); }
  int world() const { return rt_.world(); }
  /// Bytes of symmetric scratch this rank uses (its region).
  std::size_t scratch_bytes() const { return rt_.lay().total; }
  const team_view& team() const { return rt_.team(); }
  /// What the communicator holds: its scratch, the engine's queues and graphs, the control block,
  /// the buffers registered, its streams (README, "Memory").
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
  /// ranks share a GPU (README, "Ranks that share a GPU"): every block of every rank's call must
  /// be able to be resident at once, so the ranks on a GPU split its SMs, two calls a rank with
  /// early launch (team/residency.hpp). Automatic choices stay under it; a call or launch that
  /// asks for more workers is refused. Your own kernels that call the device-side API keep to it
  /// too (their grids are yours).
  unsigned block_cap() const { return rt_.block_cap(); }
  typename P::stream stream() const { return rt_.own_stream(); }
  device_comm<P> device_handle() const { return rt_.device_handle(); }

  // -- collectives --------------------------------------------------------------------------------
  /// out[i] = in[i] reduced over all ranks. In place when in == out.
  template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
  void all_reduce(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    detail::check_elements<T>("all_reduce", count, 1);
    detail::check_buffer("all_reduce", "send buffer", in, count);
    detail::check_buffer("all_reduce", "recv buffer", out, count);
    detail::check_overlap("all_reduce", in, count, out, count, in == out);
    if constexpr (std::is_same_v<B, dma::copy_engine>)
      ce_.all_reduce(rt_, reg_, "all_reduce", in, out, count, op, o);
    else
      run<collective::all_reduce, A, B>("all_reduce", in, out, count, 0, op, o);
  }

  /// in: world blocks of `count`; out (count elements) = block `rank` reduced over all ranks.
  /// In place when out == in + rank * count.
  template <class A = algo::automatic, class B = dma::automatic, element T, class Op = op::sum>
  void reduce_scatter(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather and "
                  "broadcast");
    detail::check_elements<T>("reduce_scatter", count, world());
    detail::check_buffer("reduce_scatter", "send buffer", in, count * world());
    detail::check_buffer("reduce_scatter", "recv buffer", out, count);
    detail::check_overlap("reduce_scatter", in, count * world(), out, count, out == in + rank() * count);
    run<collective::reduce_scatter, A, B>("reduce_scatter", in, out, count, 0, op, o);
  }

  /// out (world blocks of `count`): block r = rank r's in. In place when in == out + rank * count.
  template <class A = algo::automatic, class B = dma::automatic, element T>
  void all_gather(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    detail::check_elements<T>("all_gather", count, world());
    detail::check_buffer("all_gather", "send buffer", in, count);
    detail::check_buffer("all_gather", "recv buffer", out, count * world());
    detail::check_overlap("all_gather", in, count, out, count * world(), in == out + rank() * count);
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_.template gather<collective::all_gather>(rt_, reg_, "all_gather", in, out, count,
                                                         count * world(), rank() * count, -1,
                                                         in != out + rank() * count, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::all_gather, A, B>("all_gather", in, out, count, 0, op::sum{}, o);
  }

  /// out = root's in on every rank (root's out too, unless in == out).
  template <class B = dma::automatic, element T>
  void broadcast(const T* in, T* out, std::size_t count, int root, const call_options<P>& o = {}) {
    detail::check_elements<T>("broadcast", count, 1);
    detail::check_root("broadcast", root, world());
    if (rank() == root) detail::check_buffer("broadcast", "send buffer", in, count);
    detail::check_buffer("broadcast", "recv buffer", out, count);
    if (rank() == root) detail::check_overlap("broadcast", in, count, out, count, in == out);
    if (o.max_ctas == 0 || std::is_same_v<B, dma::copy_engine>)
      return ce_.template gather<collective::broadcast>(rt_, reg_, "broadcast", in, out, count, count, 0,
                                                        root, rank() == root && in != out, o);
    if constexpr (!std::is_same_v<B, dma::copy_engine>)
      run<collective::broadcast, algo::direct, B>("broadcast", in, out, count, root, op::sum{}, o);
  }

  /// root's out = in reduced over all ranks.
  template <class B = dma::automatic, element T, class Op = op::sum>
  void reduce(const T* in, T* out, std::size_t count, int root, Op op = {}, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather and "
                  "broadcast");
    detail::check_elements<T>("reduce", count, 1);
    detail::check_root("reduce", root, world());
    detail::check_buffer("reduce", "send buffer", in, count);
    if (rank() == root) {
      detail::check_buffer("reduce", "recv buffer", out, count);
      detail::check_overlap("reduce", in, count, out, count, in == out);
    }
    run<collective::reduce, algo::direct, B>("reduce", in, out, count, root, op, o);
  }

  /// in and out: world blocks of `count`; block p of in goes to rank p, where it lands as block
  /// (this rank) of out. Not in place: in and out must not overlap.
  template <class B = dma::automatic, element T>
  void all_to_all(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    static_assert(!std::is_same_v<B, dma::copy_engine>,
                  "ark: dma::copy_engine offers all_reduce, all_gather and "
                  "broadcast");
    detail::check_elements<T>("all_to_all", count, world());
    detail::check_buffer("all_to_all", "send buffer", in, count * world());
    detail::check_buffer("all_to_all", "recv buffer", out, count * world());
    detail::check_overlap("all_to_all", in, count * world(), out, count * world(), false);
    run<collective::all_to_all, algo::direct, B>("all_to_all", in, out, count, 0, op::sum{}, o);
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
    return detail::plan_call<K, A, B, T>(rt_, count, o);
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
  /// A collective over a channel backend: planned, joined to the previous call, launched.
  template <collective K, class A, class B, class T, class Op>
  void run(const char* call, const T* in, T* out, std::size_t count, int root, const Op& op,
           const call_options<P>& o) {
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    rt_.check_usable(call);
    const call_plan cp = plan<K, A, B, T>(count, o);
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
};

} // namespace ark
