// ark/communicator/ce_protocol.hpp: the host side of the copy-engine collectives
// (dma::copy_engine; the kernels and flag values are collectives/copy_engine.hpp). Every byte
// moves with a copy straight into the peers' registered recv buffers; flags (ready / sent / done
// per peer, values = a per-call epoch and a hash of the call and of where its recv buffer lies)
// order the copies; one-warp kernels write and wait for them. The all-reduce runs in rounds on
// three streams of its own, made with the communicator (push, fold, gather), so that a round's
// copies in, reduction and copies out overlap the neighbouring rounds'; where ranks share a
// context, whose hardware queues every stream of every rank needs one of (docs/guide.md, "Ranks that
// share a GPU"), on the call's stream alone, one step after the other.
//
// The enqueue order completes one step at a time: every flag write is launched before any later
// wait of the rank's own, whatever stream either is on. Streams that share a hardware queue run
// their work in exactly that order (and a step that waits holds up the queue's later steps), and
// the host platform runs every launch when it is made, so the host suite checks that order.
#pragma once

#include "ark/collectives/copy_engine.hpp"
#include "ark/communicator/planner.hpp"
#include "ark/communicator/registry.hpp"

#include <cstdint>
#include <utility>

namespace ark {

template <device P>
class ce_protocol {
  using stream_t = typename P::stream;

public:
  ce_protocol() = default;
  ce_protocol(const ce_protocol&) = delete;
  ce_protocol& operator=(const ce_protocol&) = delete;
  ~ce_protocol() { release(); }

  /// Makes the all-reduce's streams (with the communicator: never once calls run), unless ranks
  /// share a context: there the all-reduce runs on the call's stream.
  void start(const rank_runtime<P>& rt) {
    if (rt.shares_context()) return;
    for (auto& s : side_) s = P::create_stream(rt.cfg().device, rt.cfg().stream_priority);
  }
  /// Waits for what runs on the side streams.
  void drain() {
    for (auto s : side_)
      if (s) P::synchronize(s);
  }
  void release() noexcept {
    for (auto& s : side_)
      if (s) P::destroy_stream(std::exchange(s, stream_t{}));
  }

  /// Streams it holds (the all-reduce's, none where ranks share a context).
  std::size_t streams() const {
    std::size_t n = 0;
    for (auto s : side_) n += s ? 1 : 0;
    return n;
  }

  /// The collectives that only copy, each block straight into its receiver's registered `out`
  /// (out_count elements, at the same place on every rank that receives): all-gather (every rank
  /// to every rank, at block `sender`), broadcast (the root to every rank), all-to-all (block p
  /// of every rank to rank p, at block `sender`), gather (every rank to the root, at block
  /// `sender`), scatter (block p of the root to rank p). `local_copy`: this rank's own block is
  /// copied into its own `out` too (not in place).
  template <collective K, class T>
  void gather(rank_runtime<P>& rt, const registry<P>& reg, const char* call, const T* in, T* out,
              std::size_t count, std::size_t out_count, int root, bool local_copy, const call_options<P>& o) {
    static_assert(only_copies(K));
    rt.check_usable(call);
    (void)detail::plan_call<K, algo::direct, dma::copy_engine, T>(rt, count, o);
    if (!count) return;
    const int me = rt.rank(), W = rt.world();
    const auto pw = reg.recv_window(call, out, out_count, me, W);
    const window_view& w = pw.v;
    const call_desc d =
        call_desc::make(K, algo::direct::id, static_cast<std::uint8_t>(dtype_of<T>), op_id<op::sum>,
                        dma::copy_engine::id, 0, has_root(K) ? root : 0, count);
    const team_view& t = rt.team();
    const layout& l = t.lay;
    std::byte* local = t.base[me];
    constexpr bool every_pair = K == collective::all_gather || K == collective::all_to_all;
    constexpr bool from_root = K == collective::broadcast || K == collective::scatter;
    auto sends_to = [&](int p) { return p != me && (every_pair || (from_root ? me == root : p == root)); };
    auto receives_from = [&](int p) {
      return p != me && (every_pair || (from_root ? p == root : me == root));
    };
    // what we send rank p, and where it lands in p's out (a sender's block, or the whole out)
    auto source = [&](int p) {
      return K == collective::all_to_all || K == collective::scatter ? in + std::size_t(p) * count : in;
    };
    const std::size_t offset = K == collective::broadcast || K == collective::scatter ? 0 : me * count;
    const std::size_t block = count * sizeof(T);
    const auto turn = rt.join_previous(o);
    ops ops(rt, call, o);
    const std::uint64_t v = detail::ce_value(++epoch_, d, pw.place);
    for (int p = 0; p < W; ++p)
      if (receives_from(p)) ops.write(l.ce_flag(t.base[p], me, layout::ce_ready), v);
    // every receiver ready (its call the same as ours) before the first copy: where launches
    // are synchronous a failed wait then stops the call before it wrote into any output
    for (int p = 0; p < W; ++p)
      if (sends_to(p)) ops.wait(l.ce_flag(local, p, layout::ce_ready), v, p);
    for (int p = 0; p < W; ++p) {
      if (!sends_to(p)) continue;
      ops.copy(w.base[p] + offset * sizeof(T), source(p), block);
      ops.write(l.ce_flag(t.base[p], me, layout::ce_sent), v);
    }
    if (local_copy) ops.copy(w.base[me] + offset * sizeof(T), source(me), block);
    for (int p = 0; p < W; ++p)
      if (receives_from(p)) ops.wait(l.ce_flag(local, p, layout::ce_sent), v, p);
    ops.flush();
    rt.mark_call(turn);
    rt.after_launch(call);
  }

  /// All-reduce: bytes on the copy engine, the reductions by short kernels, in pipelined rounds
  /// on three streams: while round k's chunks travel to the peers, round k - 1 is reduced and
  /// round k - 2's result copied out.
  template <class T, class Op>
  void all_reduce(rank_runtime<P>& rt, const registry<P>& reg, const char* call, const T* in, T* out,
                  std::size_t count, const Op& op, const call_options<P>& o) {
    static_assert(reduce_op<Op, T>,
                  "ark: Op is not a reduction operator for T (see ark/concepts/reduce_op.hpp)");
    rt.check_usable(call);
    const call_plan plan =
        detail::plan_call<collective::all_reduce, algo::two_shot, dma::copy_engine, T>(rt, count, o);
    if (!count) return;
    const int W = rt.world(), me = rt.rank();
    const auto pw = reg.recv_window(call, out, count, me, W);
    const window_view& w = pw.v;
    const team_view& t = rt.team();
    const layout& l = t.lay;
    std::byte* local = t.base[me];
    const call_desc d =
        call_desc::make(collective::all_reduce, algo::two_shot::id, static_cast<std::uint8_t>(dtype_of<T>),
                        op_id<Op>, dma::copy_engine::id, 0, 0, count);
    const auto turn = rt.join_previous(o);
    ops main(rt, call, o);
    main.preload(detail::ce_reduce_work<T, Op>{in, out, {}, W, me, 0, op});
    const launch_shape shape{plan.ctas, plan.threads};
    if (W == 1) {
      if (in != out) main.copy(out, in, count * sizeof(T));
      if constexpr (finalizing_op<Op, T>)
        main.launch(shape, detail::ce_reduce_work<T, Op>{in, out, {}, 1, 0, count, op});
      rt.mark_call(turn);
      return rt.after_launch(call);
    }
    const std::size_t round_elems = detail::ce_round_elems<T>(l, rt.cfg().ce_chunk_bytes); // > 0: planned
    const std::size_t rounds = div_up(detail::ce_longest_chunk<T>(count, W), round_elems);
    // round k: part k of chunk r (rank r reduces chunk r), or nothing once the chunk is done
    auto part = [&](int r, std::size_t k) {
      const elem_range c = split({0, count}, W, r, align_elems<T>);
      const std::size_t b = std::min(c.len, k * round_elems);
      return elem_range{c.begin + b, std::min(round_elems, c.len - b)};
    };
    const std::uint64_t epoch = epoch_;
    epoch_ += rounds;
    auto value = [&](std::size_t k) { return detail::ce_value(epoch + 1 + k, d, pw.place); };
    for (auto s : side_)
      if (s) P::order_after(s, main.stream(), rt.order_event());
    // without side streams (ranks that share a context) all three are the call's stream: the
    // steps run in the order enqueued, round after round, which the order below allows
    ops push(rt, call, o, side_[0]), fold(rt, call, o, side_[1]), gather(rt, call, o, side_[2]);
    // The flags of round k sit in half k % 2; both halves of our scratch are free (the previous
    // call's reductions ended before it did). Every write below is flushed before a later wait
    // of ours is enqueued (the order above).
    for (std::size_t k = 0; k < 2 && k < rounds; ++k)
      for (int q = 0; q < W; ++q)
        if (q != me) fold.write(l.ce_flag(t.base[q], me, layout::ce_ready + k), value(k));
    fold.flush();
    for (std::size_t k = 0; k < rounds; ++k) {
      const unsigned h = static_cast<unsigned>(k % 2);
      const std::uint64_t v = value(k);
      // push: our part of each peer's chunk into half h of its scratch once that half is free
      for (int q = 0; q < W; ++q) {
        if (q == me) continue;
        push.wait(l.ce_flag(local, q, layout::ce_ready + h), v, q);
        const elem_range pq = part(q, k);
        push.copy(l.ce_scratch(t.base[q], me, h), in + pq.begin, pq.len * sizeof(T));
        push.write(l.ce_flag(t.base[q], me, layout::ce_sent + h), v);
      }
      push.flush(); // the last peer's `sent`, before the fold's wait below
      // fold: once every peer's part of our chunk landed (one warp waits), reduce it; free the
      // half for round k + 2
      for (int q = 0; q < W; ++q)
        if (q != me) fold.wait(l.ce_flag(local, q, layout::ce_sent + h), v, q);
      const elem_range mine = part(me, k);
      if (mine.len) {
        detail::ce_reduce_work<T, Op> work{in + mine.begin, out + mine.begin, {}, W, me, mine.len, op};
        for (int r = 0; r < W; ++r) work.scratch[r] = reinterpret_cast<const T*>(l.ce_scratch(local, r, h));
        fold.launch(shape, work);
        gather.order_after(fold); // before the writes below: they join the next round's waits
      }
      for (int q = 0; q < W; ++q)
        if (q != me && k + 2 < rounds)
          fold.write(l.ce_flag(t.base[q], me, layout::ce_ready + h), value(k + 2));
      fold.flush(); // `ready` for round k + 2, before the push's wait of that round
      // gather: our result into every peer's recv buffer, once reduced
      if (!mine.len) continue;
      for (int q = 0; q < W; ++q)
        if (q != me) gather.copy(w.base[q] + mine.begin * sizeof(T), out + mine.begin, mine.len * sizeof(T));
    }
    // our results landed in every peer (copies run in order on a stream, the flag after them),
    // and every peer's in ours. After our last reduction even when we gathered nothing (an
    // empty chunk): `done` may be written only once the peers passed their previous call's wait
    // for it, which our first reduction's wait for their `sent` implies
    gather.order_after(fold);
    const std::uint64_t last = value(rounds - 1);
    for (int q = 0; q < W; ++q)
      if (q != me) gather.write(l.ce_flag(t.base[q], me, layout::ce_done), last);
    for (int q = 0; q < W; ++q)
      if (q != me) gather.wait(l.ce_flag(local, q, layout::ce_done), last, q);
    push.flush();
    fold.flush();
    gather.flush();
    for (auto s : side_)
      if (s) P::order_after(main.stream(), s, rt.order_event());
    rt.mark_call(turn);
    rt.after_launch(call);
  }

private:
  /// The operations of one copy-engine call on one stream: copies (a copy engine on GPUs, done at
  /// once on the host), flag writes and waits as one-warp kernels (ce_flags_work: a flag is
  /// written only while the rank has recorded no failure).
  class ops {
  public:
    /// On the call's stream, or on `side` (a side stream, ordered by the caller).
    ops(rank_runtime<P>& rt, const char* call, const call_options<P>& o, stream_t side = {})
        : rt_(rt), call_(call), s_(side ? side : rt.stream_of(o)), comm_(rt.call_handle(o)) {
      if constexpr (async_device<P>) {
        if (side) return; // the call's stream was checked
        if (P::capturing(s_))
          detail::throw_invalid(call,
                                "the copy-engine path cannot be captured in a CUDA graph (its flags carry "
                                "a per-call epoch): call it eagerly");
        P::use_device(P::stream_device(s_));
      }
      if (!side) preload(w_);
    }
    ops(const ops&) = delete;
    ops& operator=(const ops&) = delete;
    typename P::stream stream() const { return s_; }

    /// Loads kernel F now, before the call enqueues anything. A call holds a flag write back for
    /// the wait kernel that follows it (write below), and where a kernel's first launch loads it
    /// (CUDA's lazy module loading), that load waits for every kernel running in its context: a
    /// first launch in the middle of the call would wait for our wait kernels, which wait for a
    /// peer that waits, in its own first launch, for the flag we hold.
    template <class F>
    void preload(const F& work) const {
      if constexpr (async_device<P>) P::preload(s_, work);
    }

    /// Writes *flag = v after the steps before it. The write joins the launch of the waits that
    /// follow it on this stream (one kernel for both on GPUs, writes first). A write that a wait
    /// on another stream must follow is flushed by the caller before that wait is enqueued.
    void write(std::uint64_t* flag, std::uint64_t v) {
      if (w_.n || w_.nw == max_world) flush();
      w_.writes[w_.nw] = flag;
      w_.written[w_.nw++] = v;
    }
    /// Waits for *flag == v (peer `peer` writes it); consecutive waits become one wait kernel.
    void wait(std::uint64_t* flag, std::uint64_t v, int peer) {
      if (w_.n && w_.value != v) flush();
      w_.value = v;
      w_.flags[w_.n] = flag;
      w_.peers[w_.n++] = peer;
    }
    void copy(void* dst, const void* src, std::size_t bytes) {
      flush();
      if (bytes) P::copy_async(dst, src, bytes, s_);
    }
    template <class F>
    void launch(launch_shape shape, const F& f) {
      flush();
      P::launch(s_, shape, f);
    }
    /// This stream's later steps start after every step of `before` so far (and of this one).
    void order_after(ops& before) {
      flush();
      before.flush();
      if (s_ != before.s_) P::order_after(s_, before.s_, rt_.order_event());
    }
    /// Launches the pending writes and waits: one block of one warp (a timeout or an abort is
    /// recorded; later waits of the call then give up at once, later writes are dropped). On the
    /// host the launch has run when it returns: a failure throws here, before any later copy.
    void flush() {
      static_assert(sizeof(w_) <= 4096, "a kernel's parameters: at most 4 KB on HIP and on CUDA before 12.1");
      if (!w_.n && !w_.nw) return;
      w_.team = comm_.team;
      P::launch(s_, launch_shape{1, P::synchronous_launch ? 1u : 32u}, w_);
      w_.n = w_.nw = 0;
      rt_.after_launch(call_);
    }

  private:
    rank_runtime<P>& rt_;
    const char* call_;
    typename P::stream s_;
    device_comm<P> comm_;
    detail::ce_flags_work<P> w_{};
  };

  stream_t side_[3]{};      // push, fold, gather (none where ranks share a context)
  std::uint64_t epoch_ = 0; ///< copy-engine rounds made
};

} // namespace ark
