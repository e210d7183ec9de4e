// ark/team/context.hpp: one worker's view of the team during one collective call.
//
// A context bundles what the transport and the algorithms need and nothing they should find for
// themselves: the scope (who cooperates), the team handle (where peers' memory is), this worker's
// index, the call description and the first pipeline step of the call. It also owns the two
// cross-cutting rules: every wait is bounded, and every failure is recorded, not thrown.
#pragma once

#include "ark/concepts/device.hpp"
#include "ark/concepts/scope.hpp"
#include "ark/team/call_desc.hpp"
#include "ark/team/team.hpp"

#include <cstddef>
#include <cstdint>

namespace ark {

/// A contiguous run of elements.
struct elem_range {
  std::size_t begin = 0;
  std::size_t len = 0;
  ARK_HD std::size_t end() const { return begin + len; }
};

ARK_HD constexpr std::size_t div_up(std::size_t a, std::size_t b) { return (a + b - 1) / b; }
template <class T>
ARK_HD constexpr T min_of(T a, T b) {
  return b < a ? b : a;
}

/// Elements of T per 16 bytes: ranges are cut on 16-byte boundaries so vectors stay aligned.
template <class T>
inline constexpr std::size_t align_elems = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);

/// Part `i` of `parts` of `r`, cut on multiples of `align` elements. Every rank computes the same.
ARK_HD inline elem_range split(elem_range r, unsigned parts, unsigned i, std::size_t align) {
  const std::size_t units = div_up(r.len, align);
  std::size_t b = units * i / parts * align, e = units * (i + 1) / parts * align;
  b = min_of(b, r.len), e = min_of(e, r.len);
  return {r.begin + b, e - b};
}

/// Elements of T one pipeline step carries (a slot's payload, LL or not), a multiple of
/// align_elems<T>.
template <class T>
ARK_HD std::size_t piece_elems(const layout& l, bool ll) {
  const std::size_t bytes = ll ? l.ll_slot_bytes : l.slot_bytes;
  return bytes / sizeof(T) / align_elems<T> * align_elems<T>;
}

/// Records the first failure of a rank in its control block; later ones are dropped. The first
/// failing worker claims the record with an atomic on the rank's own (device) memory (the control
/// block is host memory, where GPUs have no native read-modify-write atomics) and publishes it
/// (publish_record: the code, stored last with release, is what the host reads first).
template <device P>
ARK_HD void record_error(const team_view& t, errc code, std::uint32_t what, int peer, unsigned worker,
                         std::uint64_t step, std::uint64_t mine, std::uint64_t theirs) {
  if (P::compare_exchange(t.lay.claim(t.local()), 0u, 1u))
    publish_record<P>(t.ctl->err, code, peer, worker, what, step, mine, theirs);
}

/// What a wait keeps between its calls to context::keep_waiting: when it began (0: at the first
/// call) and when it next reads the abort flag.
struct wait_clock {
  std::uint64_t start = 0;
  std::uint64_t next_abort = 0;
};

template <device P, class B, scope G>
class context {
public:
  using platform = P;
  using backend = B;
  using group_type = G;

  G& g;
  const team_view& team;
  const unsigned worker;
  const unsigned workers;
  const call_desc desc;
  const std::uint64_t round; ///< first pipeline step of this call on every channel of this worker
  /// The worker's last call that used a step used one, the first of its call on every rank, in
  /// which this worker received every peer's packets (worker_state::round's exchanged bit):
  /// every peer had finished reading all earlier steps before it sent them, so every slot but
  /// that step's is free in every peer (credits implied, see all_reduce_one_shot_ll).
  const bool exchanged;
  /// An earlier call of this worker failed (worker_state::failed_bit): its step was not passed,
  /// so a call now would reuse it while a late peer may still read it. Every thread of the scope
  /// reads the same word (written before the barrier that ended the last call).
  const bool failed_before;

  /// The scope's first two threads read the abort flag once per this much waiting, the other
  /// threads once per 100 times as much (see keep_waiting).
  static constexpr std::uint64_t abort_poll_ns = 100000;

  ARK_HD context(G& grp, const team_view& t, unsigned w, unsigned nw, call_desc d)
      : context(grp, t, w, nw, d, t.lay.state(t.local(), w)->round) {}

  /// A context whose steps start at `first` on its channels: a point-to-point worker counts its
  /// steps per peer and direction (algorithms/p2p.hpp), not per call. `failed`: an earlier call
  /// of the worker failed (failed_before).
  ARK_HD static context at_step(G& grp, const team_view& t, unsigned w, unsigned nw, call_desc d,
                                std::uint64_t first, bool failed) {
    return context(grp, t, w, nw, d, first | (failed ? worker_state::failed_bit : 0));
  }

  ARK_HD int rank() const { return team.rank; }
  ARK_HD int world() const { return team.world; }
  ARK_HD const layout& lay() const { return team.lay; }
  ARK_HD std::byte* local() const { return team.local(); }
  ARK_HD std::byte* remote(int r) const { return team.base[r]; }
  /// This worker's channel for peer p in our region (p writes its head, data and barrier flags
  /// there; we keep our staging toward p and p's acks of our steps there) and ours in p's region
  /// (where we write, p reads): layout::link_of.
  ARK_HD ark::link in_link(int p) const { return team.lay.link_of(worker, rank(), p); }
  ARK_HD ark::link out_link(int p) const { return team.lay.link_of(worker, p, rank()); }

  /// This worker's share of `count` elements.
  template <class T>
  ARK_HD elem_range partition(std::size_t count) const {
    return split({0, count}, workers, worker, align_elems<T>);
  }

  /// Elements of T one pipeline step carries (a slot's payload), a multiple of align_elems<T>.
  template <class T>
  ARK_HD std::size_t piece_elems() const {
    return ark::piece_elems<T>(lay(), B::ll);
  }

  // -- failures ---------------------------------------------------------------------------------
  ARK_HD bool aborted() const { return P::load_relaxed(&team.ctl->abort) != 0; }

  /// Whether a failure of this rank was recorded (its claim word is taken). A relaxed load: every
  /// polling thread of a rank reads it (an atomic read-modify-write there, with its system fence,
  /// made 64 Ki polling threads queue on one word, tens of microseconds per round).
  ARK_HD bool failed_here() const { return P::load_relaxed(team.lay.claim(team.local())) != 0; }

  /// Records the first failure of this rank; later ones are dropped.
  ARK_HD void fail(errc code, std::uint32_t what, int peer, std::uint64_t step, std::uint64_t mine,
                   std::uint64_t theirs) const {
    record_error<P>(team, code, what, peer, worker, step, mine, theirs);
  }

  /// Spins until *flag >= value. On a timeout or an abort, records it and returns false.
  /// `before_writes`: the caller only writes after the wait (a credit), so the load need only be
  /// ordered before later stores (P::load_before_writes), not before later loads.
  ARK_HD bool wait_geq(const std::uint64_t* flag, std::uint64_t value, wait_kind kind, int peer,
                       bool before_writes = false) const {
    auto load = [&] { return before_writes ? P::load_before_writes(flag) : P::load_acquire(flag); };
    std::uint64_t seen = load();
    if (seen >= value) return true;
    wait_clock clock;
    for (unsigned spins = 0;; ++spins) {
      P::pause(spins);
      seen = load();
      if (seen >= value) return true;
      if ((spins & 63u) == 63u && !keep_waiting(clock, kind, peer, value, seen)) return false;
    }
  }

  /// For pollers that spin themselves, called every 64 spins: false (and recorded) once the wait
  /// timed by `clock` has lasted too long or the communicator was aborted. The clock starts here,
  /// at the first call: it is read only by waits that outlast 64 spins (on a GPU a read of the
  /// global timer is itself a slow round trip), and a wait's bound counts from there.
  /// The abort flag lives in host memory: from a GPU, a read is a PCIe round trip, and if every
  /// polling thread (up to 64 Ki per rank) read it every 64 spins, their reads would queue for
  /// hundreds of microseconds. That would delay the rank's next call, so its peer's waits would
  /// outlast abort_poll_ns too and read it in turn: a stall that feeds itself, on both GPUs
  /// (docs/perf.md). So the scope's first two threads read it once per abort_poll_ns of
  /// waiting (two: where thread p waits for peer p, rank 0's thread 0 has no peer) and the others
  /// once per 100: an abort ends the wait of the thread that sees it, and failed_here() the
  /// others' (within 10 ms when neither of the two is waiting). A wait that outlasts 10 ms still
  /// has every thread read the flag once per 10 ms: a burst, bounded.
  /// Also false, with nothing recorded, once another thread of this rank recorded a failure: a
  /// wait whose peer went wrong elsewhere (say, a packet of a mismatched call that will never
  /// come) ends with that failure, not at the timeout. Nothing else is read here: a rank is not
  /// told of a mismatch a peer found (in a ring, a rank whose neighbours match it waits for the
  /// timeout), because any further read in this function, even once per abort period, lengthened
  /// every device-initiated call (docs/perf.md).
  ARK_HD bool keep_waiting(wait_clock& clock, wait_kind kind, int peer, std::uint64_t expected,
                           std::uint64_t seen) const {
    if (failed_here()) return false;
    const std::uint64_t now = P::now_ns();
    const std::uint64_t period = g.thread_rank() < 2 ? abort_poll_ns : 100 * abort_poll_ns;
    if (clock.start == 0) {
      clock.start = now;
      clock.next_abort = now + period;
      return true;
    }
    if (now >= clock.next_abort) {
      clock.next_abort = now + period;
      if (aborted()) {
        fail(errc::aborted, static_cast<std::uint32_t>(kind), peer, expected, expected, seen);
        return false;
      }
    }
    if (now - clock.start > team.timeout_ns) {
      fail(errc::timeout, static_cast<std::uint32_t>(kind), peer, expected, expected, seen);
      return false;
    }
    return true;
  }

  /// Compares a peer's description of step `step` with ours; records a mismatch.
  ARK_HD bool check_peer_call(const call_desc& theirs, std::uint64_t their_step, int peer,
                              std::uint64_t step) const {
    std::uint64_t a = 0, b = 0;
    desc_field f = desc.first_difference(theirs, a, b);
    if (f == desc_field::none && their_step != step) f = desc_field::sequence, a = step, b = their_step;
    if (f == desc_field::none) return true;
    fail(errc::mismatch, static_cast<std::uint32_t>(f), peer, step, a, b);
    return false;
  }

  // -- synchronisation ---------------------------------------------------------------------------
  /// Scope-collective barrier of this worker with the same worker of every rank: returns once
  /// every rank reached it (false, recorded, on a timeout).
  ARK_HD bool barrier() const {
    worker_state* st = lay().state(local(), worker);
    const std::uint64_t epoch = st->bar_epoch + 1;
    const int tid = static_cast<int>(g.thread_rank()), nt = static_cast<int>(g.size());
    g.sync();
    for (int p = tid; p < world(); p += nt)
      if (p != rank()) P::store_release(lay().bar(remote(p), out_link(p)), epoch);
    bool ok = true;
    for (int p = tid; p < world() && ok; p += nt)
      if (p != rank()) ok = wait_geq(lay().bar(local(), in_link(p)), epoch, wait_kind::barrier, p);
    const bool failed = g.sync_any(!ok);
    if (g.thread_rank() == 0) st->bar_epoch = epoch;
    g.sync();
    return !failed;
  }

  // -- end of a call ----------------------------------------------------------------------------
  /// Marks this worker's calls failed from now on (failed_before). Scope-collective.
  ARK_HD void mark_failed() const {
    if (g.thread_rank() == 0) lay().state(local(), worker)->round |= worker_state::failed_bit;
    g.sync();
  }

  /// Ends a call that used `steps` pipeline steps: waits for the DMA backend, acknowledges the
  /// steps of channels the call left unused so that senders never wait on them (unless the call
  /// received every step from every peer: then they are acknowledged already), and advances this
  /// worker's round. Scope-collective.
  ARK_HD bool finish(std::uint64_t steps, bool received_every_step = false) const {
    const bool ok = B::flush(*this);
    if (steps == 0) return ok;
    g.sync();
    const std::uint64_t next = round + steps;
    if (!received_every_step)
      for (int p = static_cast<int>(g.thread_rank()); p < world(); p += static_cast<int>(g.size()))
        if (p != rank()) P::store_after_reads(lay().ack(remote(p), out_link(p)), next);
    // a call that went on behind a failed one (every built-in send and receive refuses first)
    // keeps the mark and fails
    if (g.thread_rank() == 0)
      lay().state(local(), worker)->round = failed_before ? next | worker_state::failed_bit : next;
    g.sync();
    return ok && !failed_before;
  }

private:
  ARK_HD context(G& grp, const team_view& t, unsigned w, unsigned nw, call_desc d, std::uint64_t word)
      : g(grp), team(t), worker(w), workers(nw), desc(d),
        round(word & ~(worker_state::exchanged_bit | worker_state::failed_bit)),
        exchanged((word & worker_state::exchanged_bit) != 0),
        failed_before((word & worker_state::failed_bit) != 0) {}
};

} // namespace ark
